// The status page's login in a real Chromium: run by tests/it/browser.rs against portaria with
// a [status] token. The page sends to the login form; a wrong token is refused; the right one
// sets a session cookie that scripts cannot read (HttpOnly); logging out ends it, on the
// server too (the old cookie sent again opens nothing).
//
// Environment: ADMIN_URL, TOKEN, SCREENSHOTS, CHROMIUM. Exit 77: playwright-core is missing.

import { join } from "node:path";

import { check, exitWith, withBrowser } from "./common.mjs";

const admin = process.env.ADMIN_URL;
const token = process.env.TOKEN;


await exitWith(() =>
  withBrowser({ viewport: { width: 390, height: 844 } }, async (page, context) => {
    await page.goto(`${admin}/`);
    check(new URL(page.url()).pathname === "/login", "the page sends to the login form");
    await page.getByLabel("Admin token").fill("not-the-token-at-all");
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForLoadState();
    check((await page.getByRole("alert").innerText()).includes("not the admin token"), "a wrong token is refused");
    await page.screenshot({ path: join(process.env.SCREENSHOTS, "login-phone.png") });
    await page.getByLabel("Admin token").fill(token);
    await page.getByRole("button", { name: "Log in" }).click();
    await page.waitForURL(`${admin}/`);
    check(await page.getByRole("heading", { name: "Now" }).isVisible(), "the right token opens the page");
    check((await page.evaluate(() => document.cookie)) === "", "the session cookie is HttpOnly");
    const cookies = await context.cookies();
    check(cookies.length === 1 && cookies[0].sameSite === "Strict" && cookies[0].httpOnly, "one SameSite=Strict cookie");
    check(!cookies[0].value.includes(token), "the cookie is not the token");
    await page.goto(`${admin}/events`);
    check(await page.getByRole("heading", { name: "Events" }).isVisible(), "the session holds across pages");
    await page.getByRole("button", { name: "Log out" }).click();
    await page.waitForURL(`${admin}/login`);
    await page.goto(`${admin}/`);
    check(new URL(page.url()).pathname === "/login", "logged out");
    // The session ended on the server too: the old cookie, sent again, opens nothing.
    await context.addCookies(cookies);
    await page.goto(`${admin}/`);
    check(new URL(page.url()).pathname === "/login", "the old session cookie is revoked");
  }),
);
