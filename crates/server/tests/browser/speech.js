// Drives the page's "speak and listen" mode (the browser's speech
// recognition and synthesis over the ordinary text turn) in headless
// Chromium (the Debian package) with playwright-core. Started by
// crates/server/tests/browser_voice.rs:
//   OC_URL       a local-mode server in deterministic mode, voice (Realtime)
//                not configured
//   OC_SHOTS     directory for screenshots (test artifacts)
//   OC_PROFILE   an empty user-data directory
//   OC_CHROMIUM  the browser binary
// The test injects a scripted fake SpeechRecognition and a fake
// speechSynthesis into the page (never the browser's own, which would send
// audio to Google): the script says what the "person" says, and checks what
// the page sent, showed and spoke.
// Prints "ok <scenario>" per passed scenario; exits non-zero on failure.
"use strict";
const path = require("path");
const { chromium } = require("playwright-core");

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error("missing environment variable " + k);
  return v;
};
const URL_ = env("OC_URL");
const SHOTS = env("OC_SHOTS");
const TIMEOUT = 20000;
const CRISIS = "I want to kill myself tonight, I have the pills right here";

function check(cond, msg) { if (!cond) throw new Error("check failed: " + msg); }
function ok(name) { console.log("ok " + name); }

// Installed before the page's own script. `mode` is "ok" (recognition
// works), "denied" (it fails with not-allowed) or "none" (the browser
// offers no speech recognition).
function fakeSpeech(mode) {
  window.__recs = [];
  window.__spoken = [];
  window.__cancels = 0;
  if (mode === "none") {
    window.SpeechRecognition = undefined;
    window.webkitSpeechRecognition = undefined;
  } else {
    class FakeRecognition {
      constructor() { this.started = false; this.aborted = false; window.__recs.push(this); }
      start() {
        this.started = true;
        if (mode === "denied") setTimeout(() => { this.fire("onerror", { error: "not-allowed" }); this.fire("onend", {}); }, 0);
      }
      stop() { this.fire("onend", {}); }
      abort() { this.aborted = true; }
      fire(name, ev) { if (typeof this[name] === "function") this[name](ev); }
    }
    window.SpeechRecognition = FakeRecognition;
    window.webkitSpeechRecognition = FakeRecognition;
    // The person says `text`: an interim result, the final one, the end.
    window.__say = (text) => {
      const rec = window.__recs[window.__recs.length - 1];
      const result = (t, isFinal) => { const r = [{ transcript: t, confidence: 0.9 }]; r.isFinal = isFinal; return r; };
      rec.fire("onresult", { resultIndex: 0, results: [result(text.split(" ").slice(0, 2).join(" "), false)] });
      rec.fire("onresult", { resultIndex: 0, results: [result(text, true)] });
      rec.fire("onend", {});
    };
  }
  window.SpeechSynthesisUtterance = class { constructor(text) { this.text = text; } };
  const synth = {
    speak(u) { window.__spoken.push(u.text); window.__utter = u; },
    cancel() { window.__cancels += 1; },
  };
  try {
    Object.defineProperty(window, "speechSynthesis", { value: synth, configurable: true });
  } catch (e) {
    window.speechSynthesis.speak = synth.speak;
    window.speechSynthesis.cancel = synth.cancel;
  }
  // The device finishes speaking the current reply.
  window.__finishSpeaking = () => { const u = window.__utter; window.__utter = null; if (u && u.onend) u.onend({}); };
}

async function open(context, mode, calls) {
  const page = await context.newPage();
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith("/api/")) calls.push({ path: u.pathname, body: r.postData() || "" });
  });
  await page.addInitScript(fakeSpeech, mode);
  await page.goto(URL_);
  await page.waitForFunction(() => document.body.dataset.ready === "1", null, { timeout: TIMEOUT });
  return page;
}

async function lastReplyDone(page, count) {
  await page.waitForFunction((n) => {
    const all = document.querySelectorAll("#log .msg:not(.user)");
    const last = all[all.length - 1];
    return all.length >= n && last && (last.dataset.state === "done" || last.dataset.state === "error");
  }, count, { timeout: TIMEOUT });
  return page.locator("#log .msg:not(.user)").last();
}

async function main() {
  const context = await chromium.launchPersistentContext(env("OC_PROFILE"), {
    executablePath: env("OC_CHROMIUM"),
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
    viewport: { width: 1280, height: 900 },
  });
  const outside = [];
  await context.route("**/*", (route) => {
    const u = new URL(route.request().url());
    if (u.hostname === "127.0.0.1" || u.protocol === "data:") return route.continue();
    outside.push(u.href);
    return route.abort();
  });

  // Off until turned on; the switch says where the audio goes.
  const calls = [];
  const page = await open(context, "ok", calls);
  check(await page.isVisible("#speech"), "the speak-and-listen switch is shown where the browser offers speech");
  check(!(await page.isChecked("#speech")), "speak and listen is off at first");
  const help = await page.textContent("#speech-help");
  check(/Google/.test(help) && /only the text/.test(help) && /read aloud by this device/.test(help),
    "the switch says recognition audio goes to Google in Chrome and replies stay on the device: " + help);
  check(await page.evaluate(() => window.__recs.length === 0), "nothing listens before it is turned on");
  check(await page.isHidden("#voice-mode"), "no voice mode is shown as active");
  ok("speak and listen is off until turned on and says where audio goes");

  // Turn it on: it listens; the mode line names the mode and where audio goes.
  await page.click("label[for=speech]");
  await page.waitForFunction(() => window.__recs.length === 1 && window.__recs[0].started, null, { timeout: TIMEOUT });
  const modeLine = await page.textContent("#voice-mode");
  check(/speak and listen/i.test(modeLine) && /Google/.test(modeLine), "the active mode and where audio goes are shown: " + modeLine);
  check(await page.isDisabled("#mic"), "the Realtime Talk button is off while speak and listen is on");

  // The person speaks: the words go through the ordinary streamed text turn.
  await page.evaluate(() => window.__say("I had a long day at work"));
  const reply = await lastReplyDone(page, 1);
  check((await reply.getAttribute("data-state")) === "done", "the reply finished: " + (await reply.innerText()));
  check((await page.locator("#log .msg.user").last().innerText()).includes("long day at work"), "the recognised words are shown as the person's message");
  const sent = calls.filter((c) => c.path === "/api/chat/stream").map((c) => JSON.parse(c.body));
  check(sent.length === 1 && sent[0].message === "I had a long day at work", "the recognised text went through /api/chat/stream");
  check(!calls.some((c) => c.path.startsWith("/api/voice/")), "no Realtime route was used");
  // The reply is spoken on the device, and nothing listens meanwhile.
  await page.waitForFunction(() => window.__spoken.length === 1, null, { timeout: TIMEOUT });
  const spoken = await page.evaluate(() => window.__spoken[0]);
  const shown = (await reply.locator(".text").innerText()).trim();
  check(spoken.length > 10 && shown.replace(/[*_`#>]/g, "").includes(spoken.split("\n")[0].trim()), "the reply shown is the reply spoken: " + spoken);
  check(await page.evaluate(() => document.body.dataset.speaking === "1"), "the page knows it is speaking");
  check(await page.evaluate(() => window.__recs.length === 1), "it does not listen while it speaks");
  await page.evaluate(() => window.__finishSpeaking());
  await page.waitForFunction(() => window.__recs.length === 2 && window.__recs[1].started, null, { timeout: TIMEOUT });
  ok("spoken words go through the text turn and the reply is spoken, then it listens again");

  // A crisis said aloud: the crisis panel with verified lines, spoken too.
  await page.evaluate((t) => window.__say(t), CRISIS);
  await page.locator("#log .msg.crisis").first().waitFor({ timeout: TIMEOUT });
  const panel = page.locator("#log .msg.crisis").first();
  check((await panel.locator(".resources li").count()) >= 1 || (await panel.innerText()).length > 40, "the crisis panel is shown");
  await page.waitForFunction(() => window.__spoken.length === 2, null, { timeout: TIMEOUT });
  const crisisSpoken = await page.evaluate(() => window.__spoken[1]);
  check(crisisSpoken.length > 20, "the crisis reply is spoken");
  await page.screenshot({ path: path.join(SHOTS, "speech-crisis.png"), fullPage: true });
  ok("a crisis said aloud shows the crisis panel");

  // Turning it off stops listening and speaking at once.
  const cancels = await page.evaluate(() => window.__cancels);
  await page.click("label[for=speech]");
  await page.waitForFunction(() => document.body.dataset.speech === "off", null, { timeout: TIMEOUT });
  check(await page.evaluate((c) => window.__cancels > c, cancels), "speaking was cancelled");
  check(await page.isHidden("#voice-mode"), "no mode is shown as active");
  check(!(await page.isDisabled("#mic")), "the Talk button is back");
  const recsOff = await page.evaluate(() => window.__recs.length);
  await page.evaluate(() => window.__finishSpeaking());
  check(await page.evaluate((n) => window.__recs.length === n, recsOff), "nothing listens after it is off");
  ok("turning speak and listen off stops it");
  await page.close();

  // A denied microphone: a clear message, the switch goes off, typing works.
  const denied = await open(context, "denied", []);
  await denied.click("label[for=speech]");
  await denied.waitForFunction(() => document.body.dataset.speech === "off", null, { timeout: TIMEOUT });
  const status = await denied.textContent("#voice-status");
  check(/not available/.test(status) && /keep typing/.test(status), "the refusal is explained: " + status);
  check(!(await denied.isChecked("#speech")), "the switch is off again");
  await denied.fill("#message", "hello there");
  await denied.press("#message", "Enter");
  const typed = await lastReplyDone(denied, 1);
  check((await typed.getAttribute("data-state")) === "done", "text chat still works");
  check(await denied.evaluate(() => window.__spoken.length === 0), "a typed reply is not spoken when the mode is off");
  ok("a denied microphone leaves text chat working");
  await denied.close();

  // A browser without speech recognition shows no switch.
  const none = await open(context, "none", []);
  check(await none.isHidden("#speech-switch"), "no switch without speech recognition");
  check(await none.isHidden("#speech-help"), "no speech help without speech recognition");
  ok("no switch where the browser offers no speech recognition");
  await none.close();

  check(outside.length === 0, "nothing left the machine: " + outside.join(", "));
  await context.close();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
