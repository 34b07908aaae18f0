// Woovi's own webhook handler (@woovi/node-sdk): `createClient().webhook.handler(...).POST` of a
// request with `body` and the `x-webhook-signature` header `signature`, which it checks with
// the Woovi public key it embeds (the production key). It answers 400 to a bad signature and
// calls the event's handler otherwise (404 for an event it has none for): `valid` is whether
// the signature got past the check.
let sdk;
try {
  sdk = await import('@woovi/node-sdk');
} catch (e) {
  console.error(String(e));
  process.exit(77);
}
let text = '';
for await (const chunk of process.stdin) text += chunk;
const given = JSON.parse(text);
const request = new Request('https://localhost/webhooks/woovi', {
  method: 'POST',
  body: given.body,
  headers: { 'x-webhook-signature': given.signature },
});
const handler = sdk.createClient({ appId: 'oracle' }).webhook.handler({
  onChargeCompleted: async () => new Response('', { status: 200 }),
});
const response = await handler.POST(request);
const answer = await response.text();
process.stdout.write(JSON.stringify({ valid: response.status !== 400, status: response.status, answer }));
