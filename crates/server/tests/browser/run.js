// Drives the OpenCouch web page in headless Chromium (the Debian package)
// with playwright-core. Started by crates/server/tests/browser.rs, which
// runs the servers and passes their addresses in the environment:
//   OC_URL        server with one user (alice), seeded memory and arcs
//   OC_LOCAL_URL  server in single-user local mode
//   OC_FAULTY_URL local-mode server whose store fails every commit
//   OC_TOKEN      alice's token
//   OC_SHOTS      directory for screenshots (test artifacts)
//   OC_PROFILE    an empty user-data directory
//   OC_CHROMIUM   the browser binary
// Prints "ok <scenario>" per passed scenario; exits non-zero on the first
// failure. Never downloads a browser.
"use strict";
const path = require("path");
const { chromium } = require("playwright-core");

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error("missing environment variable " + k);
  return v;
};
const URL_ = env("OC_URL");
const LOCAL_URL = env("OC_LOCAL_URL");
const FAULTY_URL = env("OC_FAULTY_URL");
const TOKEN = env("OC_TOKEN");
const SHOTS = env("OC_SHOTS");
const TIMEOUT = 20000;

function check(cond, msg) {
  if (!cond) throw new Error("check failed: " + msg);
}
function ok(name) {
  console.log("ok " + name);
}
async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, name + ".png"), fullPage: true });
}

// The last assistant reply once its stream has finished.
async function lastReply(page) {
  const reply = page.locator("#log .msg:not(.user)").last();
  await reply.waitFor({ state: "attached", timeout: TIMEOUT });
  await page.waitForFunction(() => {
    const all = document.querySelectorAll("#log .msg:not(.user)");
    const last = all[all.length - 1];
    return last && (last.dataset.state === "done" || last.dataset.state === "error");
  }, null, { timeout: TIMEOUT });
  return reply;
}

async function sendMessage(page, text) {
  const before = await page.locator("#log .msg.user").count();
  await page.fill("#message", text);
  await page.press("#message", "Enter");
  await page.locator("#log .msg.user").nth(before).waitFor({ timeout: TIMEOUT });
  const reply = await lastReply(page);
  check((await reply.getAttribute("data-state")) === "done", "the reply finished without error: " + (await reply.innerText()));
  return reply;
}

async function main() {
  const context = await chromium.launchPersistentContext(env("OC_PROFILE"), {
    executablePath: env("OC_CHROMIUM"),
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
  });
  const outside = [];
  const problems = [];
  // Nothing may leave this machine: every request must go to the server.
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.hostname === "127.0.0.1" || u.protocol === "data:") return route.continue();
    outside.push(u.href);
    return route.abort();
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(TIMEOUT);
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => {
    // 401/404 and the 422 of scenario 15's over-long plan entry are
    // answers the page handles; any other error is a problem.
    if (m.type() === "error" && !/status of (40[14]|422)/.test(m.text())) problems.push("console: " + m.text());
  });
  page.on("dialog", (d) => problems.push("unexpected native dialog: " + d.message()));

  // 1. Token sign-in: the form, a wrong token, then alice's token.
  await page.goto(URL_ + "/");
  await page.locator("#signin-view").waitFor({ state: "visible" });
  check(await page.locator("#app-view").isHidden(), "the app is hidden before sign-in");
  await shot(page, "01-signin-desktop");
  await page.fill("#token", "not-a-real-token");
  await page.press("#token", "Enter");
  await page.locator("#signin-error", { hasText: "not accepted" }).waitFor();
  await page.fill("#token", TOKEN);
  await page.click("#signin button[type=submit]");
  await page.locator("#app-view").waitFor({ state: "visible" });
  await page.locator("#who", { hasText: "Signed in as alice" }).waitFor();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  ok("token sign-in (wrong token refused, right token accepted)");

  // 2. The mood chart renders the three seeded arcs.
  await page.locator("#chart svg").waitFor();
  const sessions = await page.locator("#chart svg g.session").count();
  check(sessions === 3, "three sessions in the chart, got " + sessions);
  check((await page.locator("#chart svg g.session line.arc").count()) === 2, "two arcs have both ends on the scale");
  const chartLabel = await page.locator("#chart svg desc").textContent();
  check(/anxious to a little better/.test(chartLabel), "the chart is described for screen readers: " + chartLabel);
  await page.locator("#chart ol.arcs li", { hasText: "overwhelmed → okay" }).waitFor();
  await page.locator("#memory ol[data-kind=rules] li", { hasText: "keep answers short" }).waitFor();
  await shot(page, "02-chart-and-memory-desktop");
  ok("mood chart renders the seeded arcs");

  // 3. Send messages (keyboard: Enter in the message box) and see streamed replies.
  const reply = await sendMessage(page, "I have been feeling anxious about my exams all week");
  const stages = (await reply.getAttribute("data-stages")) || "";
  check(stages.includes("safety check"), "stage labels were shown while streaming: " + stages);
  check(Number(await reply.getAttribute("data-chunks")) > 0, "the reply arrived in chunks");
  check((await reply.innerText()).trim().length > 20, "the reply has text");
  ok("message gets a streamed reply with stage labels");
  await sendMessage(page, "Work has been stressful and I keep worrying about deadlines");
  await sendMessage(page, "Talking it through helped, I feel a bit calmer now");
  await shot(page, "03-chat-desktop");

  // 4. End the session with thumbs up and see the summary.
  await page.click("#end-open");
  check((await page.getAttribute("#end-open", "aria-expanded")) === "true", "the end panel is announced as expanded");
  await page.click("#end-panel button[data-feedback=positive]");
  await page.locator("#summary h3", { hasText: "Session summary" }).waitFor();
  const summary = await page.locator("#summary").innerText();
  check(/Mood/.test(summary) && /anxious/.test(summary), "the summary shows the mood arc: " + summary);
  check(/Thank you for the feedback/.test(summary), "feedback was recorded: " + summary);
  await page.waitForFunction(() => document.querySelectorAll("#chart svg g.session").length === 4);
  await shot(page, "04-summary-desktop");
  ok("end session with thumbs feedback shows the summary and adds to the chart");

  // 5. A crisis message shows the calm resources panel with tappable links.
  await sendMessage(page, "I live in the US and I want to kill myself tonight, I have the pills ready");
  const panel = page.locator("#log .msg.crisis").last();
  await panel.waitFor();
  check((await panel.getAttribute("role")) === "region", "the crisis panel is a labelled region");
  const tel = panel.locator("a[href^='tel:']");
  check((await tel.count()) >= 1, "at least one phone link");
  const telText = await tel.first().innerText();
  check(/Call \+?[0-9]/.test(telText), "the number is visible on the link: " + telText);
  const web = panel.locator("a[href^='https://']");
  check((await web.count()) >= 1, "at least one https link");
  for (const href of await panel.locator("a").evaluateAll((as) => as.map((a) => a.getAttribute("href")))) {
    check(/^(tel:|sms:|https:\/\/)/.test(href), "only tel:, sms: and https: links: " + href);
  }
  await panel.scrollIntoViewIfNeeded();
  await shot(page, "05-crisis-desktop");
  await page.setViewportSize({ width: 390, height: 844 });
  await panel.screenshot({ path: path.join(SHOTS, "05-crisis-panel-phone.png") });
  const tapBox = await tel.first().boundingBox();
  check(tapBox && tapBox.height >= 44, "the call link is a comfortable tap target");
  await page.setViewportSize({ width: 1280, height: 900 });
  ok("crisis message shows the resources panel");

  // 6. Delete a memory item: cancel keeps it, confirm deletes it.
  const rule = page.locator("#memory ol[data-kind=rules] li").first();
  await rule.locator("button").click();
  await page.locator("#confirm[open]").waitFor();
  await page.click("#confirm button[value=cancel]");
  await page.locator("#confirm").waitFor({ state: "hidden" });
  check((await page.locator("#memory ol[data-kind=rules] li").count()) === 1, "cancel keeps the item");
  await rule.locator("button").click();
  await page.locator("#confirm[open]").waitFor();
  await shot(page, "06-confirm-delete-desktop");
  await page.click("#confirm-delete");
  await page.locator("#memory-status", { hasText: "Deleted" }).waitFor({ state: "attached" });
  await page.locator("#memory h3#mem-rules", { hasText: "(0)" }).waitFor();
  ok("memory item deleted after confirmation");

  // 7. Recall toggle round-trips through the API.
  await page.click("label[for=recall]");
  await page.locator("#memory-status", { hasText: "recall is on" }).waitFor({ state: "attached" });
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  check(await page.isChecked("#recall"), "recall stays on after a reload");
  ok("recall toggle");

  // 8. Incognito: banner, reply, and nothing of it shows in memory.
  await page.click("label[for=incognito]");
  await page.locator("#incognito-help").waitFor({ state: "visible" });
  check(await page.locator("#log .msg").count() === 0, "incognito starts an empty conversation");
  await sendMessage(page, "my name is Sam and I work nights");
  await shot(page, "07-incognito-desktop");
  await page.click("label[for=incognito]");
  await page.locator("#incognito-help").waitFor({ state: "hidden" });
  ok("incognito switch");

  // 9. Phone width: the same page, one column, nothing cut off.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, "no horizontal scrolling at phone width (" + overflow + " px)");
  const box = await page.locator("#send").boundingBox();
  check(box && box.height >= 44, "the send button is a comfortable tap target");
  await shot(page, "08-phone");
  await page.locator("#log .msg.crisis").last().scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, "09-crisis-phone.png") });
  ok("usable at phone width");

  // 10. Keyboard only: the skip link, then Tab order reaches the composer.
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.click("#new-thread");
  await page.keyboard.press("Tab");
  const focused = await page.evaluate(() => document.activeElement && document.activeElement.id);
  check(typeof focused === "string", "focus moves with Tab");
  await page.focus("#message");
  await page.keyboard.type("hello again");
  await page.keyboard.press("Enter");
  await lastReply(page);
  const unlabeled = await page.evaluate(() => Array.from(document.querySelectorAll("button, input, textarea"))
    .filter((e) => e.offsetParent !== null)
    .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute("aria-label") && !e.textContent.trim())
    .map((e) => e.outerHTML.slice(0, 80)));
  check(unlabeled.length === 0, "every visible control has a label: " + unlabeled.join(" | "));
  ok("keyboard use and labelled controls");

  // 11. Swagger UI from vendored assets.
  await page.goto(URL_ + "/api/docs");
  await page.locator(".swagger-ui .opblock").first().waitFor();
  const ops = await page.locator(".swagger-ui .opblock").count();
  check(ops >= 16, "every operation is listed, got " + ops);
  await shot(page, "10-api-docs");
  ok("swagger ui lists the API");

  // 12. Local mode: no sign-in, straight to the conversation.
  await page.goto(LOCAL_URL + "/");
  await page.locator("#app-view").waitFor({ state: "visible" });
  check(await page.locator("#signin-view").isHidden(), "no sign-in form in local mode");
  await page.locator("#who", { hasText: "Local mode" }).waitFor();
  check(await page.locator("#signout").isHidden(), "no sign-out in local mode");
  await sendMessage(page, "hello from local mode");
  ok("local mode needs no token");

  // 13. A crisis episode: the country given in a follow-up brings that
  // country's lines into the panel; a statement of being safe closes it.
  await page.click("#new-thread");
  let ep = await sendMessage(page, "I want to kill myself");
  check(await ep.evaluate((e) => e.classList.contains("crisis")), "the crisis panel");
  check(/which country/.test(await ep.innerText()), "asks where the person is");
  ep = await sendMessage(page, "I'm in the UK");
  check(await ep.evaluate((e) => e.classList.contains("crisis")), "the follow-up stays in the crisis panel");
  const ukTel = await ep.locator("a[href^='tel:']").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
  check(ukTel.includes("tel:116123"), "the panel links Samaritans: " + ukTel.join(", "));
  const ukText = await ep.innerText();
  check(/999/.test(ukText) && !/988/.test(ukText), "UK emergency number, no US line: " + ukText);
  await shot(page, "11-crisis-follow-up-uk");
  ep = await sendMessage(page, "idk");
  check(await ep.evaluate((e) => e.classList.contains("crisis")), "a flat reply stays in the crisis panel");
  check((await ep.locator("a[href='tel:116123']").count()) === 1, "still the UK lines");
  ep = await sendMessage(page, "i'm safe now, i'm with my sister");
  check(!(await ep.evaluate((e) => e.classList.contains("crisis"))), "an ordinary reply once safe");
  check(/^I'm really glad you're feeling safer/.test(await ep.locator(".text").innerText()), "the warm acknowledgement first");
  ok("crisis follow-up shows the local lines, and closes when safe");

  // 15. The safety plan card and the "I need help now" button: the plan
  // is saved, and the button shows it with the verified lines, no message.
  await page.fill("#plan-coping", "cold water on my face\nthe long walk by the canal");
  await page.fill("#plan-people", "my cousin Ilse +44 7700 900777");
  await page.fill("#plan-reasons_to_live", "my niece");
  await page.click("#plan-save");
  await page.waitForFunction(() => document.getElementById("plan-status").textContent === "Your safety plan is saved.", null, { timeout: TIMEOUT });
  check((await page.inputValue("#plan-people")) === "my cousin Ilse +44 7700 900777", "the contact comes back as written");
  await page.fill("#plan-distractions", "x".repeat(501));
  await page.click("#plan-save");
  await page.waitForFunction(() => document.getElementById("plan-status").textContent.startsWith("Not saved:"), null, { timeout: TIMEOUT });
  check((await page.locator("#plan-status").innerText()).includes("distractions[0]"), "the error names the field");
  await page.fill("#plan-distractions", "");
  const messagesBefore = await page.locator("#log .msg").count();
  await page.click("#sos-open");
  const sos = page.locator("#sos");
  await sos.locator(".resources li").first().waitFor({ timeout: TIMEOUT });
  check((await sos.locator(".own-plan").innerText()).includes("the long walk by the canal"), "the plan in the help view");
  check((await sos.locator(".own-plan a[href='tel:+447700900777']").innerText()).includes("your number"), "their own number, marked as theirs");
  check((await sos.locator(".resources a[href^='tel:'], .resources a[href^='https:']").count()) >= 1, "verified lines");
  check((await page.locator("#log .msg").count()) === messagesBefore, "no message was sent");
  await shot(page, "13-sos");
  await page.click("#sos-close");
  // Signed out, the button still shows the lines (no plan, no token).
  const anon = await context.newPage();
  await anon.goto(URL_ + "/");
  await anon.locator("#signin-view").waitFor({ state: "visible" });
  await anon.click("#sos-open");
  await anon.locator("#sos .resources li").first().waitFor({ timeout: TIMEOUT });
  check((await anon.locator("#sos .own-plan").count()) === 0, "no plan without a sign-in");
  await anon.close();
  ok("safety plan card saves, and the help button shows it with the lines");

  // 14. Storage failing: a crisis reply still arrives, with one calm line.
  await page.goto(FAULTY_URL + "/");
  await page.locator("#app-view").waitFor({ state: "visible" });
  await page.waitForFunction(() => document.body.dataset.ready === "1");
  ep = await sendMessage(page, "I am going to kill myself tonight, I have the pills ready");
  check(await ep.evaluate((e) => e.classList.contains("crisis")), "the crisis panel without storage");
  check((await ep.locator("a[href^='tel:'], a[href^='https:']").count()) >= 1, "resources shown");
  const unsaved = ep.locator(".unsaved");
  check((await unsaved.count()) === 1, "one not-saved line");
  check((await unsaved.innerText()) === "This conversation couldn't be saved right now.", "the calm wording");
  await shot(page, "12-crisis-unsaved");
  ok("crisis reply arrives when storage fails, marked as not saved");

  await context.close();
  check(outside.length === 0, "no request left the machine: " + outside.join(", "));
  check(problems.length === 0, "no script errors or CSP violations: " + problems.join(" | "));
  ok("no outside requests, no console errors");
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
