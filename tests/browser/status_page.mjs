// The status page in a real Chromium (Debian's), driven by playwright-core: run by
// tests/it/browser.rs, which has started portaria with a forward target that fails and made
// one event dead. Here: the overview shows the red banner; the dead event's page shows its
// error; the target is fixed; "Replay this event" is clicked; the event ends delivered; the
// rejected request is listed with its reason, and its page has no button. Screenshots (desktop and phone width) go to $SCREENSHOTS.
//
// Environment: ADMIN_URL (http://127.0.0.1:PORT), TARGET_URL (the forward target; POST /fix
// makes it answer 200), EVENT_ID, SCREENSHOTS (a directory), CHROMIUM (default
// /usr/bin/chromium). Exit 77: playwright-core is not installed (npm install --prefix
// tests/browser).

import { join } from "node:path";

import { check, exitWith, withBrowser } from "./common.mjs";

const admin = process.env.ADMIN_URL;
const target = process.env.TARGET_URL;
const eventId = process.env.EVENT_ID;
const expectDead = Number(process.env.EXPECT_DEAD || "1");
const shots = process.env.SCREENSHOTS;

const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };


/** The page fits the viewport's width: nothing to scroll sideways but the tables' own boxes. */
async function fitsWidth(page, width) {
  const scroll = await page.evaluate(() => document.documentElement.scrollWidth);
  check(scroll <= width + 1, `no sideways scrolling at ${width} px (${scroll})`);
}

await exitWith(() =>
  withBrowser({ viewport: DESKTOP }, async (page, context) => {
    // The page needs nothing but portaria: any request elsewhere (a CDN, a font) fails.
    const elsewhere = [];
    context.on("request", (r) => {
      if (new URL(r.url()).hostname !== "127.0.0.1") elsewhere.push(r.url());
    });
    const errors = [];
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));

    // The overview: the red banner names the dead event.
    await page.goto(`${admin}/`);
    const banner = page.locator(".banner.alert");
    check(await banner.isVisible(), "the red banner is shown");
    const deadText = `${expectDead} dead event${expectDead === 1 ? "" : "s"}`;
    check((await banner.innerText()).includes(deadText), `the banner says "${deadText}"`);
    check(await page.locator("svg[role=img]").isVisible(), "the 48-hour chart is drawn");
    await page.screenshot({ path: join(shots, "overview-desktop.png"), fullPage: true });

    const phone = await context.newPage();
    await phone.setViewportSize(PHONE);
    await phone.goto(`${admin}/`);
    check(await phone.locator(".banner.alert").isVisible(), "the banner on a phone");
    await fitsWidth(phone, PHONE.width);
    await phone.screenshot({ path: join(shots, "overview-phone.png"), fullPage: true });

    // From the banner to the dead events, and to the one event.
    await banner.getByRole("link").first().click();
    await page.waitForURL(/\/events\?status=dead/);
    await page.getByRole("link", { name: eventId, exact: true }).click();
    await page.waitForURL(new RegExp(`/events/${eventId}$`));
    const dead = page.locator(".banner.alert");
    check((await dead.innerText()).includes("Dead"), "the event's page says it is dead");
    const error = await page.locator("dd.error").first().innerText();
    check(error.includes("500"), `the error is shown (${error})`);
    check((await page.locator("table tbody tr").count()) >= 2, "every attempt is listed");
    await page.screenshot({ path: join(shots, "event-dead-desktop.png"), fullPage: true });
    await phone.goto(page.url());
    await fitsWidth(phone, PHONE.width);
    await phone.screenshot({ path: join(shots, "event-dead-phone.png"), fullPage: true });

    // Fix the target, replay, and watch the event end delivered.
    const fixed = await fetch(`${target}/fix`, { method: "POST" });
    check(fixed.ok, "the target is fixed");
    const [replayed] = await Promise.all([
      page.waitForResponse((r) => r.url().endsWith(`/events/${eventId}/replay`)),
      page.getByRole("button", { name: "Replay this event" }).click(),
    ]);
    check(replayed.status() === 303, `the replay form is taken (${replayed.status()})`);
    await page.waitForLoadState();
    const deadline = Date.now() + 20_000;
    let status = "";
    while (Date.now() < deadline) {
      status = await page.locator("dl.facts .badge").first().innerText();
      if (status === "delivered") break;
      await page.waitForTimeout(250);
      await page.reload();
    }
    check(status === "delivered", `the replayed event ends delivered (${status})`);
    await page.screenshot({ path: join(shots, "event-delivered-desktop.png"), fullPage: true });
    // The rest of the endpoint's dead events, with the card's button.
    await page.goto(`${admin}/`);
    if (expectDead > 1) {
      const [all] = await Promise.all([
        page.waitForResponse((r) => r.url().endsWith("/replay-dead")),
        page.getByRole("button", { name: /^Replay all \d+ dead events? of / }).click(),
      ]);
      check(all.status() === 303, `the replay-all form is taken (${all.status()})`);
      await page.waitForURL(/\/events\?endpoint=/);
      const until = Date.now() + 20_000;
      while (Date.now() < until && (await page.locator(".badge.delivered").count()) < expectDead) {
        await page.waitForTimeout(250);
        await page.reload();
      }
      check((await page.locator(".badge.delivered").count()) === expectDead, "every event delivered");
      await page.goto(`${admin}/`);
    }
    check(await page.locator(".banner.ok").isVisible(), "the banner is no longer red");
    await page.screenshot({ path: join(shots, "overview-after-replay-desktop.png"), fullPage: true });
    // The rejected request (a bad signature): listed from the nav with its reason, its page
    // shows the command that explains it and nothing to press.
    await page.getByRole("link", { name: "Rejected", exact: true }).click();
    await page.waitForURL(/\/rejected$/);
    await page.screenshot({ path: join(shots, "rejected-list-desktop.png"), fullPage: true });
    const row = page.locator("tbody tr").first();
    check((await row.innerText()).includes("bad signature"), "the rejected list says why");
    await row.getByRole("link").first().click();
    await page.waitForURL(/\/rejected\/\d+$/);
    const command = await page.locator("pre code").first().innerText();
    check(/^portaria verify --rejected \d+$/.test(command), `the command to explain it (${command})`);
    check((await page.getByRole("button").count()) === 0, "no button on a rejected request");
    await page.screenshot({ path: join(shots, "rejected-desktop.png"), fullPage: true });
    await phone.goto(`${admin}/rejected`);
    await fitsWidth(phone, PHONE.width);
    check(errors.length === 0, `no console errors (${errors.join("; ")})`);
    check(elsewhere.length === 0, `no request off loopback (${elsewhere.join(", ")})`);
  }),
);
