#!/usr/bin/env node
// A portaria pipe handler: `forward = { pipe = ["node", "/srv/pipe-handler.js"] }`.
//
// One JSON event per line on stdin, one JSON answer per line on stdout (docs/forwarding.md,
// "The pipe protocol"). With PIPE_HANDLER_FILE set, each event line is appended to that file;
// otherwise a line about it goes to stderr, which portaria logs. Ends at EOF on stdin.
const fs = require("fs");
const readline = require("readline");

const out = process.env.PIPE_HANDLER_FILE;
readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const event = JSON.parse(line);
  let answer;
  try {
    const body = "body" in event ? Buffer.from(event.body) : Buffer.from(event.body_base64, "base64");
    // Handle the event here; throw to have portaria retry it later. Trust event.signed_id over
    // the body (Mercado Pago signs no body: fetch the payment by it), and event_type only if
    // event.event_type_signed (docs/forwarding.md, "What the signature covers").
    if (out) fs.appendFileSync(out, line + "\n");
    else console.error(`event ${event.id} (${event.event_type}): ${body.length} bytes`);
    answer = { id: event.id, ok: true };
  } catch (e) {
    answer = { id: event.id, ok: false, error: String(e) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
});
