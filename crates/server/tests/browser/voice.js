// Drives the page's voice mode in headless Chromium (the Debian package)
// with playwright-core. Started by crates/server/tests/browser_voice.rs:
//   OC_URL       a local-mode server whose voice channel mints secrets at
//                the test kit's fake Realtime server (loopback)
//   OC_SHOTS     directory for screenshots (test artifacts)
//   OC_PROFILE   an empty user-data directory
//   OC_CHROMIUM  the browser binary
// The test injects a scripted fake RTCPeerConnection and data channel into
// the page (never a real network): the SDP offer still goes to the fake
// server's /realtime/calls, then the script plays a realistic event
// sequence and checks what the page sent and showed.
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

function check(cond, msg) { if (!cond) throw new Error("check failed: " + msg); }
function ok(name) { console.log("ok " + name); }

// Installed before the page's own script: a fake peer connection whose data
// channel records what the page sends and lets the test deliver events.
function fakeWebRtc() {
  window.__sent = [];
  class FakeChannel extends EventTarget {
    constructor(label) { super(); this.label = label; this.readyState = "connecting"; }
    send(data) { window.__sent.push(JSON.parse(data)); }
    close() { this.readyState = "closed"; }
  }
  class FakePeer extends EventTarget {
    constructor() { super(); this.tracks = []; window.__pc = this; }
    addTrack(track) { this.tracks.push(track.kind); }
    createDataChannel(label) { this.dc = new FakeChannel(label); window.__dc = this.dc; return this.dc; }
    async createOffer() { return { type: "offer", sdp: "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n" }; }
    async setLocalDescription(d) { this.local = d; }
    async setRemoteDescription(d) {
      this.remote = d;
      window.__answer = d.sdp;
      this.dc.readyState = "open";
      this.dc.dispatchEvent(new Event("open"));
    }
    close() { this.closed = true; window.__closed = true; }
  }
  window.RTCPeerConnection = FakePeer;
  window.__emit = (ev) => window.__dc.dispatchEvent(new MessageEvent("message", { data: JSON.stringify(ev) }));
}

async function main() {
  const context = await chromium.launchPersistentContext(env("OC_PROFILE"), {
    executablePath: env("OC_CHROMIUM"),
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
      "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
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
  const calls = [];
  const page = context.pages()[0] || (await context.newPage());
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith("/api/voice/") || u.pathname.startsWith("/v1/realtime/")) {
      calls.push({ path: u.pathname, body: r.postData() || "", auth: r.headers()["authorization"] || "" });
    }
  });
  await page.addInitScript(fakeWebRtc);
  await page.goto(URL_);
  await page.waitForFunction(() => document.body.dataset.ready === "1", null, { timeout: TIMEOUT });

  // Connect.
  const consoleLines = [];
  page.on("console", (m) => consoleLines.push(m.text()));
  await page.click("#mic");
  try {
    await page.waitForFunction(() => document.body.dataset.voice === "on", null, { timeout: TIMEOUT });
  } catch (e) {
    throw new Error("voice did not start: " + (await page.textContent("#voice-status")) + " | " + consoleLines.join(" | "));
  }
  check((await page.getAttribute("#mic", "aria-pressed")) === "true", "the mic button shows the call is on");
  const session = calls.find((c) => c.path === "/api/voice/realtime/session");
  check(session, "the page asked for a session");
  const sdp = calls.find((c) => c.path === "/v1/realtime/calls");
  check(sdp && sdp.auth.startsWith("Bearer ek_"), "the SDP offer went out with the ephemeral secret only");
  check(await page.evaluate(() => window.__dc.label === "oai-events"), "the data channel is oai-events");
  check(await page.evaluate(() => window.__pc.tracks.includes("audio")), "the microphone track was added");
  check(await page.evaluate(() => window.__answer.startsWith("v=0")), "the SDP answer was applied");
  ok("voice connects with the minted secret");

  // An ordinary exchange with a function call, deltas and a barge-in.
  await page.evaluate(() => window.__emit({ type: "conversation.item.input_audio_transcription.completed", item_id: "i1", transcript: "I had a long day at work" }));
  await page.waitForFunction(() => window.__sent.some((e) => e.type === "response.create"), null, { timeout: TIMEOUT });
  const create = await page.evaluate(() => window.__sent.find((e) => e.type === "response.create"));
  check(create.response && create.response.instructions, "the turn policy's instructions were sent");
  await page.evaluate(() => {
    window.__emit({ type: "response.function_call_arguments.done", call_id: "call_1", name: "load_therapeutic_response_skill", arguments: "{\"style\":\"supportive\",\"approach\":\"none\"}" });
  });
  await page.waitForFunction(() => window.__sent.some((e) => e.type === "conversation.item.create" && e.item.call_id === "call_1"), null, { timeout: TIMEOUT });
  const out = await page.evaluate(() => window.__sent.find((e) => e.type === "conversation.item.create"));
  check(out.item.type === "function_call_output" && out.item.output.length > 2, "the tool output went back on the data channel");
  await page.evaluate(() => {
    window.__emit({ type: "response.done", response: { id: "r1" } });
    window.__emit({ type: "response.output_audio_transcript.delta", delta: "That sounds " });
    window.__emit({ type: "input_audio_buffer.speech_started" });
  });
  await page.waitForFunction(() => window.__sent.some((e) => e.type === "response.cancel"), null, { timeout: TIMEOUT });
  await page.evaluate(() => {
    window.__emit({ type: "response.output_audio_transcript.done", transcript: "That sounds tiring." });
    window.__emit({ type: "response.done", response: { id: "r2" } });
    window.__emit({ type: "response.done", response: { id: "r3" } });
  });
  await page.waitForFunction(() => document.body.dataset.voiceTurns === "1", null, { timeout: TIMEOUT });
  const turn = JSON.parse(calls.find((c) => c.path === "/api/voice/realtime/turn").body);
  check(turn.user_text === "I had a long day at work", "the user transcript was recorded");
  check(turn.assistant_text === "That sounds tiring.", "the assistant transcript was recorded");
  check(turn.tool_calls.length === 1 && turn.tool_calls[0].status === "completed", "the tool call was recorded");
  check(calls.some((c) => c.path === "/api/voice/realtime/tools"), "the page ran the tool through /tools");
  check(calls.some((c) => c.path === "/api/voice/realtime/turn-policy"), "the page asked the turn policy");
  check((await page.locator("#log .msg.user").last().innerText()).includes("long day"), "the user transcript is shown");
  check((await page.locator("#log .msg.assistant").last().innerText()).includes("tiring"), "the assistant transcript is shown");
  ok("voice exchange: policy, tool, transcripts, barge-in, recording");

  // A crisis transcript: the app shows the crisis panel with resources.
  await page.evaluate(() => window.__emit({ type: "conversation.item.input_audio_transcription.completed", item_id: "i2", transcript: "I want to kill myself tonight, I have the pills right here" }));
  await page.locator("#log .msg.crisis").first().waitFor({ timeout: TIMEOUT });
  const panel = page.locator("#log .msg.crisis").first();
  check((await panel.locator(".resources li").count()) >= 1, "the crisis panel lists verified resources");
  await page.waitForFunction(() => window.__sent.filter((e) => e.type === "response.create").length >= 3, null, { timeout: TIMEOUT });
  const crisisCreate = await page.evaluate(() => window.__sent.filter((e) => e.type === "response.create").pop());
  check(crisisCreate.response.tool_choice && crisisCreate.response.tool_choice.name === "lookup_crisis_resources",
    "the crisis response must call lookup_crisis_resources: " + JSON.stringify(crisisCreate));
  check(!create.response.tool_choice, "an ordinary response chooses its tools freely");
  check((await panel.getAttribute("data-source")) === "app", "the panel comes from the app");
  await page.evaluate(() => {
    window.__emit({ type: "response.output_audio_transcript.done", transcript: "I'm here with you." });
    window.__emit({ type: "response.done", response: { id: "r4" } });
  });
  await page.waitForFunction(() => document.body.dataset.voiceTurns === "2", null, { timeout: TIMEOUT });
  await page.screenshot({ path: path.join(SHOTS, "voice-crisis.png"), fullPage: true });
  ok("voice crisis transcript shows the crisis panel");

  // Hang up: the call closes and the end-of-session question opens; ending
  // goes through the voice route.
  await page.click("#mic");
  await page.waitForFunction(() => document.body.dataset.voice === "off" && window.__closed === true, null, { timeout: TIMEOUT });
  await page.locator("#end-panel").waitFor({ state: "visible", timeout: TIMEOUT });
  await page.click("#end-panel button[data-feedback='positive']");
  await page.locator("#summary h3").waitFor({ timeout: TIMEOUT });
  check(calls.some((c) => c.path === "/api/voice/realtime/end" && c.body.includes("positive")), "the session ended through the voice route with feedback");
  ok("voice hang-up ends the session with feedback");

  check(outside.length === 0, "nothing left the machine: " + outside.join(", "));
  await context.close();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
