// Shopify's own validator (@shopify/shopify-api): `shopify.webhooks.validate` of a request with
// `headers` and `body` for the app secret `secret`. Shopify ships no signer. The SDK also wants
// the unsigned informational headers (topic, shop domain, API version); fill them in if absent.
let api;
try {
  await import('@shopify/shopify-api/adapters/web-api');
  api = await import('@shopify/shopify-api');
} catch (e) {
  console.error(String(e));
  process.exit(77);
}
const { shopifyApi, ApiVersion, LogSeverity } = api;
let text = '';
for await (const chunk of process.stdin) text += chunk;
const given = JSON.parse(text);
const shopify = shopifyApi({
  apiKey: 'oracle',
  apiSecretKey: given.secret,
  scopes: [],
  hostName: 'localhost',
  apiVersion: Object.values(ApiVersion).at(-1),
  isEmbeddedApp: false,
  logger: { level: LogSeverity.Error, log: () => {} },
});
const headers = new Headers(given.headers);
for (const [name, value] of [
  ['x-shopify-topic', 'orders/create'],
  ['x-shopify-shop-domain', 'oracle.myshopify.com'],
  ['x-shopify-api-version', '2025-01'],
]) {
  if (!headers.has(name)) headers.set(name, value);
}
const rawRequest = new Request('https://localhost/webhooks', { method: 'POST', body: given.body, headers });
const result = await shopify.webhooks.validate({ rawBody: given.body, rawRequest });
process.stdout.write(JSON.stringify({ valid: result.valid, reason: result.reason ?? null }));
