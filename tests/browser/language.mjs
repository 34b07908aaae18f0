// The status page's language in a real Chromium (Debian's): run by tests/it/browser.rs, which
// has started portaria with a forward target that fails and made EXPECT_DEAD events dead. A
// Chromium whose language is Brazilian Portuguese (it sends `Accept-Language: pt-BR,pt;q=0.9`
// itself: nothing here sets the header) is shown the page in Brazilian Portuguese, `<html
// lang="pt-BR">`; one whose language is American English the same page in English. Each
// browser follows the nav's dead link to the dead events and opens one. Headless Chromium on
// Linux takes its language from `--accept-lang` (tried here with Debian's 156: `--lang=pt-BR`,
// `LANGUAGE=pt_BR` and `LANG=pt_BR.UTF-8` all left it at `en-US,en;q=0.9`). Screenshots of the overview in
// both languages go to $SCREENSHOTS (overview-pt-BR-desktop.png is docs/status-page-pt-BR.png).
//
// Environment: ADMIN_URL, EVENT_ID, EXPECT_DEAD, SCREENSHOTS, CHROMIUM. Exit 77:
// playwright-core is missing.

import { join } from "node:path";

import { check, exitWith, withBrowser } from "./common.mjs";

const admin = process.env.ADMIN_URL;
const eventId = process.env.EVENT_ID;
const dead = Number(process.env.EXPECT_DEAD || "1");
const shots = process.env.SCREENSHOTS;


// What each language's page must say: the browser's flag, `<html lang>`, and phrases.
const LANGUAGES = [
  {
    flag: "pt-BR",
    html: "pt-BR",
    now: "Agora",
    banner: `${dead} eventos mortos`,
    deadLink: "Mortos",
    badge: "morto",
    replay: "Reenviar este evento",
    button: new RegExp(`^Reenviar ${dead} eventos mortos de `),
    elsewhere: ["Needs you", "Replay", "Received"],
  },
  {
    flag: "en-US",
    html: "en",
    now: "Now",
    banner: `${dead} dead events`,
    deadLink: "Dead",
    badge: "dead",
    replay: "Replay this event",
    button: new RegExp(`^Replay all ${dead} dead events of `),
    elsewhere: ["Precisa", "Reenviar", "Recebido"],
  },
];

/** One browser whose language is `lang.flag`, through the page; its overview's screenshot. */
async function visit(lang) {
  const browser = { viewport: { width: 1280, height: 900 }, args: [`--accept-lang=${lang.flag}`] };
  await withBrowser(browser, async (page) => {
    const [response] = await Promise.all([page.waitForResponse(`${admin}/`), page.goto(`${admin}/`)]);
    const asked = (await response.request().allHeaders())["accept-language"] || "";
    check(asked.startsWith(lang.flag), `a ${lang.flag} browser asks for ${asked}`);
    check((response.headers().vary || "").includes("accept-language"), "the page varies by language");
    const htmlLang = await page.evaluate(() => document.documentElement.lang);
    check(htmlLang === lang.html, `<html lang="${htmlLang}">`);
    check(await page.getByRole("heading", { name: lang.now, exact: true }).isVisible(), `the heading "${lang.now}"`);
    const banner = page.locator(".banner.alert");
    const said = await banner.innerText();
    check(said.includes(lang.banner), `the banner says "${lang.banner}" (${said})`);
    check(await page.getByRole("button", { name: lang.button }).isVisible(), `the card's button ${lang.button}`);
    const text = await page.locator("body").innerText();
    for (const other of lang.elsewhere) {
      check(!text.includes(other), `nothing in the other language ("${other}")`);
    }
    await page.screenshot({ path: join(shots, `overview-${lang.flag}-desktop.png`), fullPage: true });

    await page.getByRole("link", { name: lang.deadLink, exact: true }).click();
    await page.waitForURL(/\/events\?status=dead/);
    const badges = await page.locator("tbody .badge.dead").allInnerTexts();
    check(badges.length === dead && badges.every((b) => b === lang.badge), `the list's badges say "${lang.badge}"`);
    await page.getByRole("link", { name: eventId, exact: true }).click();
    await page.waitForURL(new RegExp(`/events/${eventId}$`));
    check(await page.getByRole("button", { name: lang.replay }).isVisible(), `the event's button "${lang.replay}"`);
  });
}

await exitWith(async () => {
  for (const lang of LANGUAGES) await visit(lang);
});
