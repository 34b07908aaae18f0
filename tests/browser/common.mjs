// What every browser script here shares: playwright-core's Chromium (exit 77 when it is not
// installed: npm install --prefix tests/browser), Debian's binary (CHROMIUM to change it),
// the flags of a quiet headless run, a check that says what it checked, and a fresh profile
// per browser, removed however the run ends.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

let chromium;
try {
  ({ chromium } = await import("playwright-core"));
} catch (e) {
  console.error(`playwright-core is not installed: ${e.message}`);
  process.exit(77);
}

export const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export function check(condition, what) {
  if (!condition) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

/** Runs `body(page, context)` in a fresh browser of `viewport` (and `args` more flags). */
export async function withBrowser({ viewport, args = [] }, body) {
  const profile = mkdtempSync(join(tmpdir(), "portaria-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [...FLAGS, ...args],
    viewport,
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    return await body(page, context);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** Runs `main`; exits 0, or 1 after printing what failed. */
export async function exitWith(main) {
  try {
    await main();
  } catch (e) {
    console.error(e.stack || String(e));
    process.exit(1);
  }
  process.exit(0);
}
