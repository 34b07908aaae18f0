// Linear's own verifier (@linear/sdk/webhooks): `new LinearWebhookClient(secret).verify(body,
// signature)`, which also checks the body's `webhookTimestamp` against the real clock (60 s).
// Linear ships no signer.
let LinearWebhookClient;
try {
  ({ LinearWebhookClient } = await import('@linear/sdk/webhooks'));
} catch (e) {
  console.error(String(e));
  process.exit(77);
}
let text = '';
for await (const chunk of process.stdin) text += chunk;
const given = JSON.parse(text);
let valid = false;
let error = null;
try {
  valid = new LinearWebhookClient(given.secret).verify(Buffer.from(given.body), given.signature);
} catch (e) {
  error = String(e.message ?? e);
}
process.stdout.write(JSON.stringify({ valid, error }));
