// The status page's controls of issue 27 in a real Chromium (Debian's), driven by
// playwright-core: run by tests/it/browser.rs, one STEP at a time, with portaria forwarding the
// pagarme endpoint (its one route) to a command that records each call. The test posts the
// webhooks and checks what the target got between the steps.
//
// STEP=pause: the overview's routes panel says pagarme is delivering; its Pause button is
//   pressed; the panel says it is paused, with the reason.
// STEP=resume: the panel still says paused, the endpoint's card counts EXPECT pending events;
//   Resume is pressed; the panel says delivering, and the events list ends with every one of
//   them delivered.
// STEP=replay: the events list is filtered by event type (TYPE, a glob); it lists EXPECT events
//   and offers "Replay these EXPECT events"; the button is pressed; the list comes back with
//   the same filter.
//
// Environment: STEP, ADMIN_URL, EXPECT, TYPE, SCREENSHOTS (a directory), CHROMIUM (default
// /usr/bin/chromium). Exit 77: playwright-core is not installed (npm install --prefix
// tests/browser).

import { join } from "node:path";

import { check, exitWith, withBrowser } from "./common.mjs";

const step = process.env.STEP;
const admin = process.env.ADMIN_URL;
const expect = Number(process.env.EXPECT || "0");
const shots = process.env.SCREENSHOTS;



/** The routes panel's row of the pagarme endpoint (its one route is named by the endpoint). */
function pagarmeRoute(page) {
  return page.locator("table.routes tr").filter({ has: page.getByText("pagarme", { exact: true }) });
}

/** Presses `name` in `scope`, a form that POSTs to `path`: answered 303, the page reloaded. */
async function press(page, scope, name, path) {
  const [answer] = await Promise.all([
    page.waitForResponse((r) => new URL(r.url()).pathname === path),
    scope.getByRole("button", { name, exact: true }).click(),
  ]);
  check(answer.status() === 303, `${path}: the form is taken (${answer.status()})`);
  await page.waitForLoadState();
}

async function pause(page) {
  await page.goto(`${admin}/`);
  const row = pagarmeRoute(page);
  check((await row.count()) === 1, "the routes panel lists pagarme");
  check((await row.innerText()).includes("delivering"), "pagarme is delivering");
  await press(page, row, "Pause", "/routes/pause");
  await page.waitForURL(`${admin}/`);
  const said = await pagarmeRoute(page).locator("td.paused").innerText();
  check(said.includes("paused since") && said.includes("(paused on the status page)"), `paused: ${said}`);
  check((await pagarmeRoute(page).getByRole("button", { name: "Resume" }).count()) === 1, "a Resume button");
  await page.screenshot({ path: join(shots, "route-paused-desktop.png"), fullPage: true });
}

async function resume(page) {
  await page.goto(`${admin}/`);
  const row = pagarmeRoute(page);
  check((await row.locator("td.paused").count()) === 1, "still paused on a new visit");
  const card = page.getByRole("region", { name: "Endpoint pagarme" });
  const pending = await card.locator("dt", { hasText: /^Pending$/ }).locator("xpath=following-sibling::dd[1]").innerText();
  check(pending === String(expect), `the card counts ${expect} pending (${pending})`);
  await page.screenshot({ path: join(shots, "route-paused-waiting-desktop.png"), fullPage: true });
  await press(page, row, "Resume", "/routes/resume");
  await page.waitForURL(`${admin}/`);
  check((await pagarmeRoute(page).innerText()).includes("delivering"), "pagarme is delivering again");
  check((await pagarmeRoute(page).getByRole("button", { name: "Pause" }).count()) === 1, "a Pause button");
  await page.goto(`${admin}/events?endpoint=pagarme`);
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline && (await page.locator(".badge.delivered").count()) < expect) {
    await page.waitForTimeout(250);
    await page.reload();
  }
  check((await page.locator(".badge.delivered").count()) === expect, `all ${expect} delivered`);
  await page.screenshot({ path: join(shots, "route-resumed-desktop.png"), fullPage: true });
}

async function replay(page) {
  const type = process.env.TYPE;
  await page.goto(`${admin}/events`);
  const filters = page.locator("form.filters");
  await filters.locator("input[name=type]").fill(type);
  await filters.getByRole("button", { name: "Show" }).click();
  await page.waitForURL(/\/events\?.*type=/);
  const rows = page.locator("table tbody tr");
  check((await rows.count()) === expect, `the filter lists ${expect} events (${await rows.count()})`);
  const button = page.getByRole("button", { name: /^Replay these \d+ events?$/ });
  const label = await button.innerText();
  check(label === `Replay these ${expect} events`, `the button says "${label}"`);
  await page.screenshot({ path: join(shots, "events-filtered-desktop.png"), fullPage: true });
  await press(page, page, label, "/replay-matching");
  const back = new URL(page.url());
  check(back.pathname === "/events" && back.searchParams.get("type") === type, `back at the filtered list (${back})`);
  await page.screenshot({ path: join(shots, "events-replayed-desktop.png"), fullPage: true });
}

await exitWith(() =>
  withBrowser({ viewport: { width: 1280, height: 900 } }, async (page, context) => {
    const errors = [];
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    const steps = { pause, resume, replay };
    check(step in steps, `a known step (${step})`);
    await steps[step](page);
    check(errors.length === 0, `no console errors (${errors.join("; ")})`);
  }),
);
