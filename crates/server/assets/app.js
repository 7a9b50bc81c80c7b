// OpenCouch web page: sign-in, streamed chat, crisis resources, incognito,
// memory panel, end of session with feedback, mood and progress chart, and
// voice: a Realtime call over WebRTC, or "speak and listen" (the browser's
// own speech recognition and synthesis over the ordinary text turn).
// Plain JavaScript, no dependencies, served by `opencouch serve`.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const store = window.sessionStorage;
  const S = {
    token: store.getItem("oc.token") || "",
    auth: "token",
    incognito: store.getItem("oc.incognito") === "1",
    busy: false,
  };

  // ---------- small helpers ----------
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function say(text) { $("memory-status").textContent = text; }
  function mode() { return S.incognito ? "incognito" : "persistent"; }

  function threadKey() { return S.incognito ? "oc.thread.incognito" : "oc.thread"; }
  function newThreadId() { return "web-" + Date.now().toString(36) + "-" + Math.random().toString(36).slice(2, 8); }
  function thread() {
    let t = store.getItem(threadKey());
    if (!t) { t = newThreadId(); store.setItem(threadKey(), t); }
    return t;
  }
  function resetThread() { store.setItem(threadKey(), newThreadId()); }

  function headers(json) {
    const h = {};
    if (S.token && S.auth !== "local") h.Authorization = "Bearer " + S.token;
    if (json) h["Content-Type"] = "application/json";
    return h;
  }

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function api(method, path, body) {
    let r;
    try {
      r = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new ApiError(0, "network", "OpenCouch cannot be reached. Check your connection and try again.");
    }
    const data = await r.json().catch(() => null);
    if (!r.ok) {
      const err = new ApiError(r.status, data && data.code, (data && data.message) || r.statusText);
      if (r.status === 401 && S.auth !== "local") signOut("Your session has ended. Please sign in again.");
      throw err;
    }
    return data;
  }

  // ---------- sign-in ----------
  function showSignin(message) {
    $("app-view").hidden = true;
    $("signin-view").hidden = false;
    $("signout").hidden = true;
    $("who").textContent = "";
    $("signin-error").textContent = message || "";
    $("token").focus();
  }

  function signOut(message) {
    S.token = "";
    store.removeItem("oc.token");
    showSignin(message);
  }

  async function showApp(who) {
    $("signin-view").hidden = true;
    $("app-view").hidden = false;
    $("who").textContent = who;
    $("signout").hidden = S.auth === "local";
    applyIncognito();
    await restoreHistory();
    await Promise.all([refreshMemory(), refreshProgress(), refreshPlan()]);
    document.body.dataset.ready = "1";
  }

  async function signIn(token) {
    S.token = token;
    try {
      const st = await api("GET", "/api/memory/status");
      store.setItem("oc.token", token);
      await showApp("Signed in as " + st.owner_id);
      $("message").focus();
    } catch (e) {
      S.token = "";
      showSignin(e.status === 401 ? "That token was not accepted. Check it and try again." : e.message);
    }
  }

  // ---------- conversation ----------
  function clearLog() {
    const log = $("log");
    log.textContent = "";
    log.append(el("p", { class: "empty", id: "log-empty", text: "Say how you are doing, or ask for a breathing exercise." }));
  }

  function addMessage(role, text) {
    const empty = $("log-empty");
    if (empty) empty.remove();
    const box = el("div", { class: "msg " + role },
      el("span", { class: "visually-hidden", text: role === "user" ? "You said: " : "OpenCouch said: " }),
      el("span", { class: "text", text: text || "" }));
    $("log").append(box);
    box.scrollIntoView({ block: "end" });
    return box;
  }

  function setText(box, text) { box.querySelector(".text").textContent = text; }

  function cleanNumber(n) { return String(n).replace(/[^0-9+]/g, ""); }
  function safeUrl(u) { return typeof u === "string" && /^https:\/\/[^\s"'<>]+$/.test(u) ? u : null; }

  function renderCrisis(box, output) {
    box.className = "msg crisis";
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", "Support you can reach now");
    box.textContent = "";
    box.append(
      el("h3", { text: "You deserve support right now" }),
      el("p", { class: "reply", text: output.response_text }));
    const res = Array.isArray(output.resources) ? output.resources : [];
    if (res.length) {
      box.append(el("h3", { text: "People you can reach" }), resourceList(res));
    }
    box.append(el("p", { class: "emergency", text: "If you are in immediate danger, call your local emergency number now." }));
  }

  // The verified lines as a list with call, text, chat and web actions.
  function resourceList(res) {
    const ul = el("ul", { class: "resources" });
    for (const r of res) {
      const actions = el("div", { class: "actions" });
      if (r.phone) actions.append(el("a", { href: "tel:" + cleanNumber(r.phone), class: "tel", text: "Call " + r.phone }));
      if (r.text) {
        const body = r.text_keyword ? "?body=" + encodeURIComponent(r.text_keyword) : "";
        const label = r.text_keyword ? "Text " + r.text_keyword + " to " + r.text : "Text " + r.text;
        actions.append(el("a", { href: "sms:" + cleanNumber(r.text) + body, class: "sms", text: label }));
      }
      const chat = safeUrl(r.chat_url);
      if (chat) actions.append(el("a", { href: chat, class: "web", target: "_blank", rel: "noopener noreferrer", text: "Chat online" }));
      const site = safeUrl(r.url);
      if (site) actions.append(el("a", { href: site, class: "web", target: "_blank", rel: "noopener noreferrer", text: "Website", "aria-label": (r.name || "Service") + " website" }));
      const meta = [r.hours, Array.isArray(r.languages) ? r.languages.join(", ") : null].filter(Boolean).join(" · ");
      ul.append(el("li", {},
        el("span", { class: "res-name", text: r.name || "Support line" }),
        meta ? el("span", { class: "res-meta", text: meta }) : null,
        actions));
    }
    return ul;
  }

  function finish(box, output) {
    if (output.response_type === "crisis") {
      renderCrisis(box, output);
      box.scrollIntoView({ block: "start" });
    }
    else setText(box, output.response_text);
    box.dataset.route = output.route || "";
    box.dataset.level = output.crisis ? String(output.crisis.level) : "";
    // A crisis reply arrives even when storage fails; say so calmly, once.
    box.dataset.saved = output.saved === false ? "0" : "1";
    if (output.saved === false && !box.querySelector(".unsaved")) {
      // A commit still running past the crisis bound is slow storage, not
      // lost: it is saved when it lands.
      const pending = output.diagnostics && output.diagnostics.storage_status === "commit_pending";
      const text = pending
        ? "Saving this conversation is taking longer than usual; it will be saved as soon as storage answers."
        : "This conversation couldn't be saved right now.";
      box.append(el("p", { class: "unsaved", text }));
    }
  }

  function handleEvent(ev, box, seen) {
    switch (ev.type) {
      case "status":
        $("stage").textContent = (ev.detail || ev.stage || "working") + "…";
        seen.stages.push(ev.detail || ev.stage);
        break;
      case "chunk":
        seen.chunks += 1;
        box.querySelector(".text").textContent += ev.text;
        break;
      case "reset":
        // The streamed reply was replaced; its replacement's chunks follow.
        box.querySelector(".text").textContent = "";
        break;
      case "response_ready":
        finish(box, ev.output);
        break;
      case "done":
        finish(box, ev.output);
        seen.done = true;
        seen.output = ev.output;
        break;
      case "error":
        box.classList.add("error");
        setText(box, "Sorry, that did not work (" + (ev.code || "error") + "). " + (ev.message || ""));
        seen.error = true;
        break;
      default:
        break;
    }
    box.dataset.stages = seen.stages.join("|");
    box.dataset.chunks = String(seen.chunks);
  }

  // Sends one message as a streamed turn; returns the final output (null
  // when the turn failed or another one is running).
  async function send(message) {
    if (S.busy) return null;
    S.busy = true;
    $("send").disabled = true;
    $("summary").textContent = "";
    addMessage("user", message);
    const box = addMessage("assistant", "");
    box.dataset.state = "streaming";
    box.setAttribute("aria-busy", "true");
    const seen = { stages: [], chunks: 0, done: false, error: false, output: null };
    try {
      const r = await fetch("/api/chat/stream", {
        method: "POST",
        headers: headers(true),
        body: JSON.stringify({ message, thread_id: thread(), memory_mode: mode() }),
      });
      if (!r.ok) {
        const e = await r.json().catch(() => ({}));
        if (r.status === 401 && S.auth !== "local") signOut("Your session has ended. Please sign in again.");
        throw new ApiError(r.status, e.code, e.message || r.statusText);
      }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n/g, "\n");
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let data = "";
          for (const line of block.split("\n")) if (line.startsWith("data:")) data += line.slice(5).trimStart();
          if (data) handleEvent(JSON.parse(data), box, seen);
        }
      }
      if (!seen.done && !seen.error) throw new ApiError(0, "interrupted", "The reply was interrupted.");
    } catch (e) {
      box.classList.add("error");
      setText(box, e.status === 0 || !e.status ? "Could not reach OpenCouch: " + e.message : e.message);
      seen.error = true;
    }
    box.dataset.state = seen.error ? "error" : "done";
    box.removeAttribute("aria-busy");
    $("stage").textContent = "";
    S.busy = false;
    $("send").disabled = false;
    $("message").focus();
    if (!S.incognito) refreshMemory();
    return seen.error ? null : seen.output;
  }

  async function restoreHistory() {
    clearLog();
    if (S.incognito) return;
    try {
      const rows = await api("GET", "/api/threads/" + encodeURIComponent(thread()) + "/history?limit=100");
      for (const row of rows) {
        if (row.role !== "user" && row.role !== "assistant") continue;
        const box = addMessage(row.role, row.content);
        // A crisis reply keeps its calm panel (its text names the resources).
        if (row.role === "assistant" && row.response_style === "crisis_response") renderCrisis(box, { response_text: row.content, resources: [] });
      }
    } catch (e) {
      if (e.status !== 404) addMessage("assistant error", "Could not load this conversation: " + e.message);
    }
  }


  // ---------- voice (Realtime over WebRTC) ----------
  // The server mints a short-lived client secret; the page connects to the
  // Realtime endpoint with it (its own key never reaches the page), asks the
  // turn policy before each response, runs function calls through the
  // server, records each exchange, and shows the crisis panel the server
  // returns. A denied microphone or a failed connection leaves text chat as
  // it was.
  const V = { pc: null, dc: null, stream: null, audio: null, userText: "", assistantText: "", calls: [],
    asstBox: null, outstanding: 0, tools: 0, used: false, crisisShown: false };

  function voiceStatus(text) { $("voice-status").textContent = text; }
  function dcSend(obj) { if (V.dc && V.dc.readyState === "open") V.dc.send(JSON.stringify(obj)); }

  function showCrisisPanel(c) {
    if (!c || V.crisisShown) return;
    V.crisisShown = true;
    const box = addMessage("assistant", "");
    renderCrisis(box, { response_text: c.reply, resources: c.resources });
    box.dataset.route = "crisis";
    box.dataset.source = "app";
    box.scrollIntoView({ block: "start" });
  }

  async function flushTurn() {
    if (!V.userText) return;
    const body = { thread_id: thread(), memory_mode: mode(), user_text: V.userText,
      assistant_text: V.assistantText, tool_calls: V.calls };
    V.userText = ""; V.assistantText = ""; V.calls = []; V.asstBox = null;
    try {
      const r = await api("POST", "/api/voice/realtime/turn", body);
      if (r.crisis) showCrisisPanel(r.crisis);
      document.body.dataset.voiceTurns = String(Number(document.body.dataset.voiceTurns || "0") + 1);
    } catch (e) {
      voiceStatus("This exchange could not be saved: " + e.message);
    }
  }

  async function runTool(ev) {
    V.tools += 1;
    const call = { tool_name: ev.name, status: "started" };
    V.calls.push(call);
    let output;
    try {
      const r = await api("POST", "/api/voice/realtime/tools", { thread_id: thread(), memory_mode: mode(),
        current_user_message: V.userText, transcript: [], tool_name: ev.name, arguments: ev.arguments || "{}" });
      output = r.output;
      call.status = "completed";
    } catch (e) {
      output = { ok: false, error: "tool_failed" };
      call.status = "failed";
    }
    dcSend({ type: "conversation.item.create", item: { type: "function_call_output", call_id: ev.call_id, output: JSON.stringify(output) } });
    // Staying quiet is the whole point of wait_for_user.
    if (ev.name !== "wait_for_user") { V.outstanding += 1; dcSend({ type: "response.create" }); }
    V.tools -= 1;
    if (V.tools === 0 && V.outstanding === 0) await flushTurn();
  }

  async function onUserTranscript(text) {
    await flushTurn();
    V.userText = text; V.assistantText = ""; V.calls = []; V.asstBox = null; V.crisisShown = false;
    addMessage("user", text);
    let p = null;
    try {
      p = await api("POST", "/api/voice/realtime/turn-policy", { thread_id: thread(), memory_mode: mode(), user_text: text, transcript: [] });
    } catch (e) {
      p = null;
    }
    if (p && p.crisis) showCrisisPanel(p.crisis);
    V.outstanding += 1;
    // The policy's instructions, and the tool it requires (the crisis
    // lookup, a grounded lookup, an exercise's step) as this response's
    // tool choice; the response after the tool's output chooses freely.
    const response = {};
    if (p && p.instructions) response.instructions = p.instructions;
    if (p && p.required_tool_name) response.tool_choice = { type: "function", name: p.required_tool_name };
    dcSend({ type: "response.create", response });
  }

  async function onVoiceEvent(ev) {
    switch (ev.type) {
      case "input_audio_buffer.speech_started":
        // Barge-in: the person talks over the reply.
        if (V.outstanding > 0) {
          dcSend({ type: "response.cancel" });
          dcSend({ type: "output_audio_buffer.clear" });
          if (V.asstBox) V.asstBox.classList.add("barged");
        }
        break;
      case "conversation.item.input_audio_transcription.completed": {
        const text = String(ev.transcript || "").trim();
        if (text) await onUserTranscript(text);
        break;
      }
      case "response.output_audio_transcript.delta":
      case "response.audio_transcript.delta":
      case "response.output_text.delta":
        if (!V.asstBox) V.asstBox = addMessage("assistant", "");
        V.assistantText += ev.delta || "";
        setText(V.asstBox, V.assistantText);
        break;
      case "response.output_audio_transcript.done":
      case "response.audio_transcript.done":
      case "response.output_text.done":
        if (typeof ev.transcript === "string" || typeof ev.text === "string") {
          V.assistantText = typeof ev.transcript === "string" ? ev.transcript : ev.text;
          if (!V.asstBox) V.asstBox = addMessage("assistant", "");
          setText(V.asstBox, V.assistantText);
        }
        break;
      case "response.function_call_arguments.done":
        await runTool(ev);
        break;
      case "response.done":
        V.outstanding = Math.max(0, V.outstanding - 1);
        if (V.outstanding === 0 && V.tools === 0) await flushTurn();
        break;
      case "error":
        voiceStatus("The voice session reported an error; you can keep talking or type.");
        break;
      default:
        break;
    }
  }

  async function startVoice() {
    if (V.pc || W.on) return;
    $("mic").disabled = true;
    $("speech").disabled = true;
    voiceStatus("Starting voice…");
    try {
      let session;
      try {
        session = await api("POST", "/api/voice/realtime/session", { thread_id: thread(), memory_mode: mode() });
      } catch (e) {
        voiceStatus(e.status === 503 ? "Voice is not available on this server: " + e.message : "Voice could not start: " + e.message);
        return;
      }
      let stream;
      try {
        stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      } catch (e) {
        voiceStatus("The microphone is not available (" + (e && e.name ? e.name : "denied") + "). You can keep typing.");
        return;
      }
      const pc = new RTCPeerConnection();
      V.pc = pc; V.stream = stream;
      V.audio = document.createElement("audio");
      V.audio.autoplay = true;
      pc.ontrack = (ev) => { V.audio.srcObject = ev.streams[0]; };
      for (const t of stream.getTracks()) pc.addTrack(t, stream);
      const dc = pc.createDataChannel("oai-events");
      V.dc = dc;
      dc.addEventListener("message", (m) => {
        let ev;
        try { ev = JSON.parse(m.data); } catch (e) { return; }
        onVoiceEvent(ev);
      });
      dc.addEventListener("open", () => { voiceStatus("Listening. Audio goes to the voice service this server uses."); document.body.dataset.voice = "on"; });
      try {
        const offer = await pc.createOffer();
        await pc.setLocalDescription(offer);
        const r = await fetch(session.calls_url, { method: "POST",
          headers: { Authorization: "Bearer " + session.client_secret, "Content-Type": "application/sdp" }, body: offer.sdp });
        if (!r.ok) throw new Error("HTTP " + r.status);
        await pc.setRemoteDescription({ type: "answer", sdp: await r.text() });
      } catch (e) {
        stopVoice(false);
        voiceStatus("Voice could not connect. You can keep typing.");
        return;
      }
      V.used = true;
      $("mic").setAttribute("aria-pressed", "true");
      $("mic").textContent = "Hang up";
      voiceMode("Active: Realtime voice call. Your voice goes from this browser to the voice service this server uses; OpenCouch keeps only the transcripts, like typed messages.");
    } finally {
      $("mic").disabled = false;
      $("speech").disabled = !!V.pc;
    }
  }

  async function stopVoice(hangUp) {
    if (hangUp) await flushTurn();
    if (V.dc) try { V.dc.close(); } catch (e) { /* already closed */ }
    if (V.pc) try { V.pc.close(); } catch (e) { /* already closed */ }
    if (V.stream) for (const t of V.stream.getTracks()) t.stop();
    V.pc = null; V.dc = null; V.stream = null; V.outstanding = 0; V.tools = 0;
    $("mic").setAttribute("aria-pressed", "false");
    $("mic").textContent = "Talk";
    $("speech").disabled = false;
    voiceMode("");
    document.body.dataset.voice = "off";
    if (hangUp) {
      voiceStatus("Call ended.");
      // End of session with feedback, as in text mode (through the voice route).
      if (V.used) toggleEndPanel(true);
    }
  }

  // ---------- voice without a Realtime model: speak and listen ----------
  // Where the browser offers speech recognition and synthesis, recognised
  // words go through the ordinary streamed text turn (so this works in
  // deterministic mode and with any text model) and the reply is read aloud
  // by the browser on this device. Off until the person turns it on; the
  // switch says which browser service hears the audio. OpenCouch receives
  // only the recognised text, never audio.
  const Recognition = window.SpeechRecognition || window.webkitSpeechRecognition;
  const W = { on: false, rec: null, listening: false, speaking: false, utter: null, heard: "", quiet: 0,
    supported: !!(Recognition && window.speechSynthesis && window.SpeechSynthesisUtterance) };
  // After this many silent listens in a row, listening pauses.
  const QUIET_LISTENS = 3;

  function voiceMode(text) { $("voice-mode").textContent = text; $("voice-mode").hidden = !text; }

  // Whose servers the browser's recognition uses, by the browser's name.
  function recognitionService() {
    const ua = navigator.userAgent || "";
    if (/Edg\//.test(ua)) return "Microsoft";
    if (/(Chrome|Chromium)\//.test(ua)) return "Google";
    return "";
  }
  function whereAudioGoes() {
    const who = recognitionService();
    return who
      ? "Your browser turns your speech into text and sends the audio to " + who + "'s servers to do it."
      : "Your browser turns your speech into text; some browsers send the audio to their maker's servers to do it.";
  }
  function speechHelp() {
    const who = recognitionService();
    return "Off until you turn it on. Your browser does the speech recognition, and some browsers send the audio to their maker's servers for it (Chrome sends it to Google)." +
      (who ? " This browser sends it to " + who + "." : "") +
      " OpenCouch receives only the text. Replies are read aloud by this device; that stays on it.";
  }

  // Reply text as it should sound: no markdown marks, links as their words.
  function spoken(text) {
    return String(text || "")
      .replace(/\[([^\]]+)\]\([^)]*\)/g, "$1")
      .replace(/[*_`#>|~]+/g, "")
      .replace(/[ \t]+\n/g, "\n")
      .trim();
  }

  function setSpeech(on, message) {
    W.on = on;
    $("speech").checked = on;
    document.body.dataset.speech = on ? "on" : "off";
    $("mic").disabled = on;
    if (on) {
      W.quiet = 0;
      voiceMode("Active: speak and listen. " + whereAudioGoes() + " OpenCouch gets only the text; replies are spoken by this device.");
      voiceStatus(message || "");
      listen();
    } else {
      const rec = W.rec;
      W.rec = null; W.listening = false; W.heard = "";
      if (rec) try { rec.abort(); } catch (e) { /* already stopped */ }
      stopSpeaking();
      voiceMode("");
      voiceStatus(message || "Speak and listen is off.");
    }
  }

  function stopSpeaking() {
    W.utter = null;
    W.speaking = false;
    document.body.dataset.speaking = "0";
    try { window.speechSynthesis.cancel(); } catch (e) { /* nothing to cancel */ }
  }

  function listen() {
    if (!W.on || W.listening || W.speaking || S.busy) return;
    let rec;
    try { rec = new Recognition(); } catch (e) { setSpeech(false, "Speech recognition could not start. You can keep typing."); return; }
    rec.lang = navigator.language || "en-US";
    rec.interimResults = true;
    rec.continuous = false;
    rec.maxAlternatives = 1;
    W.rec = rec; W.listening = true; W.heard = "";
    rec.onresult = (ev) => {
      let final = "", interim = "";
      for (let i = ev.resultIndex || 0; i < ev.results.length; i++) {
        const r = ev.results[i];
        if (r.isFinal) final += r[0].transcript; else interim += r[0].transcript;
      }
      // What is being heard shows in the message box, on this page only.
      if (interim && !final) $("message").value = interim.trim();
      if (final.trim()) W.heard = (W.heard ? W.heard + " " : "") + final.trim();
    };
    rec.onerror = (ev) => {
      const code = ev && ev.error ? ev.error : "error";
      if (code === "no-speech" || code === "aborted") return;
      const why = code === "not-allowed" || code === "service-not-allowed" || code === "audio-capture"
        ? "The microphone or speech recognition is not available (" + code + ")."
        : code === "network"
          ? "Your browser's speech recognition service could not be reached."
          : "Speech recognition stopped (" + code + ").";
      setSpeech(false, why + " Speak and listen is off; you can keep typing.");
    };
    rec.onend = () => {
      if (W.rec !== rec) return;
      W.rec = null; W.listening = false;
      const text = W.heard.trim();
      W.heard = "";
      if (!W.on) return;
      if (text) { W.quiet = 0; speakTurn(text); return; }
      W.quiet += 1;
      if (W.quiet >= QUIET_LISTENS) {
        voiceStatus("Listening paused after a quiet spell. Turn speak and listen off and on to talk again, or type.");
        return;
      }
      listen();
    };
    try {
      rec.start();
      voiceStatus("Listening…");
      document.body.dataset.listening = String(Number(document.body.dataset.listening || "0") + 1);
    } catch (e) {
      W.rec = null; W.listening = false;
      setSpeech(false, "Speech recognition could not start. You can keep typing.");
    }
  }

  // One spoken turn: the recognised words as an ordinary message, then the
  // reply read aloud, then listening again.
  async function speakTurn(text) {
    if (S.busy) { $("message").value = text; listen(); return; }
    $("message").value = "";
    voiceStatus("Sending what you said…");
    const out = await send(text);
    if (!W.on) return;
    const words = out ? spoken(out.response_text) : "";
    if (!words) { voiceStatus(out ? "" : "That did not go through; you can say it again or type."); listen(); return; }
    speak(words);
  }

  function speak(text) {
    stopSpeaking();
    const u = new window.SpeechSynthesisUtterance(text);
    u.lang = navigator.language || "en-US";
    W.utter = u; W.speaking = true;
    document.body.dataset.speaking = "1";
    const done = () => {
      if (W.utter !== u) return;
      W.utter = null; W.speaking = false;
      document.body.dataset.speaking = "0";
      listen();
    };
    u.onend = done;
    u.onerror = done;
    voiceStatus("Speaking the reply…");
    window.speechSynthesis.speak(u);
  }

  function setupSpeech() {
    $("speech-switch").hidden = !W.supported;
    $("speech-help").hidden = !W.supported;
    if (!W.supported) return;
    $("speech-help").textContent = speechHelp();
    $("speech").checked = false;
    $("speech").addEventListener("change", (e) => {
      if (e.target.checked && V.pc) { e.target.checked = false; voiceStatus("Hang up the voice call first."); return; }
      setSpeech(e.target.checked);
    });
  }

  // ---------- end of session ----------
  function toggleEndPanel(open) {
    $("end-panel").hidden = !open;
    $("end-open").setAttribute("aria-expanded", String(open));
    if (open) $("end-panel").querySelector("button").focus();
  }

  async function endSession(feedback) {
    toggleEndPanel(false);
    const out = $("summary");
    out.textContent = "";
    try {
      const s = V.used
        ? await api("POST", "/api/voice/realtime/end", { thread_id: thread(), feedback, memory_mode: mode() })
        : await api("POST", "/api/threads/" + encodeURIComponent(thread()) + "/end", { feedback, memory_mode: mode() });
      V.used = false;
      out.append(el("h3", { text: s.summary ? "Session summary" : "Session ended" }));
      if (s.summary) {
        out.append(el("p", { class: "summary-text", text: s.summary }));
        const dl = el("dl");
        const row = (k, v) => { if (v) dl.append(el("dt", { text: k }), el("dd", { text: v })); };
        row("Mood", (s.mood_opened || "not stated") + " → " + (s.mood_closed || "not stated"));
        row("Themes", (s.themes || []).join(", "));
        row("Turns", s.turn_count ? String(s.turn_count) : "");
        row("Still open", (s.open_loops || []).join("; "));
        out.append(dl);
      } else {
        out.append(el("p", { text: s.detail || "This session was too short to summarize." }));
      }
      if (feedback !== "skip") out.append(el("p", { class: "muted", text: s.feedback_recorded ? "Thank you for the feedback." : "Your feedback could not be saved." }));
      out.append(el("p", { class: "muted", text: "Your next message starts a new session." }));
      resetThread();
      clearLog();
    } catch (e) {
      out.append(el("p", { text: e.status === 404 ? "There is nothing to end yet: send a message first." : e.message }));
    }
    out.focus();
    refreshMemory();
    refreshProgress();
  }

  // ---------- memory ----------
  const KINDS = [["facts", "Facts you shared", "fact"], ["sessions", "Past sessions", "session"], ["rules", "Your preferences", "preference"]];

  function confirmDelete(text) {
    const dlg = $("confirm");
    $("confirm-text").textContent = text;
    if (typeof dlg.showModal !== "function") return Promise.resolve(window.confirm("Delete this for good?\n" + text));
    return new Promise((resolve) => {
      dlg.addEventListener("close", () => resolve(dlg.returnValue === "delete"), { once: true });
      dlg.returnValue = "cancel";
      dlg.showModal();
    });
  }

  async function deleteItem(kind, noun, row, button) {
    const ok = await confirmDelete(row.text);
    if (!ok) { button.focus(); return; }
    try {
      await api("DELETE", "/api/memory/" + kind + "/" + row.index);
      say("Deleted " + noun + " " + row.index + ".");
    } catch (e) {
      say(e.status === 404 ? "That item was already gone." : "Could not delete: " + e.message);
    }
    await refreshMemory();
    if (kind === "sessions") refreshProgress();
    $("mem-h").setAttribute("tabindex", "-1");
    $("mem-h").focus();
  }

  async function refreshMemory() {
    const box = $("memory");
    $("memory-off").hidden = !S.incognito;
    try {
      const st = await api("GET", "/api/memory/status");
      setRecall(!!st.proactive_recall_enabled);
      const lists = await Promise.all(KINDS.map(([kind]) => api("GET", "/api/memory/" + kind)));
      box.textContent = "";
      KINDS.forEach(([kind, title, noun], k) => {
        const rows = lists[k];
        box.append(el("h3", { id: "mem-" + kind, text: title + " (" + rows.length + ")" }));
        if (!rows.length) { box.append(el("p", { class: "muted small-text", text: "Nothing saved." })); return; }
        const ol = el("ol", { class: "mem", "aria-labelledby": "mem-" + kind, "data-kind": kind });
        for (const row of rows) {
          const b = el("button", { type: "button", class: "secondary small", text: "Delete", "aria-label": "Delete " + noun + " " + row.index + ": " + row.text.slice(0, 60) });
          b.addEventListener("click", () => deleteItem(kind, noun, row, b));
          ol.append(el("li", {}, el("div", { class: "item" }, el("span", { class: "text", text: row.text }), b)));
        }
        box.append(ol);
      });
    } catch (e) {
      if (e.status !== 401) { box.textContent = ""; box.append(el("p", { class: "error", text: "Memory is unavailable: " + e.message })); }
    }
  }

  function setRecall(on) {
    $("recall").checked = on;
    $("recall-help").textContent = on
      ? "On: I may bring up what we talked about in past sessions."
      : "Off: memory shapes my tone, but I only mention past sessions when you ask.";
  }

  // ---------- mood and progress ----------
  function shortDate(iso) {
    const d = new Date(iso);
    return isNaN(d) ? "" : d.toLocaleDateString(undefined, { month: "short", day: "numeric" });
  }

  function drawChart(sessions, scale) {
    const c = $("chart");
    c.textContent = "";
    c.className = "chart";
    if (!sessions.length) {
      c.append(el("p", { class: "muted", text: "After you end a session, its mood at the start and the end appears here." }));
      return;
    }
    const shown = sessions.slice(-12);
    const min = scale && typeof scale.min === "number" ? scale.min : -2;
    const max = scale && typeof scale.max === "number" ? scale.max : 2;
    const W = 340, H = 180, L = 70, R = 26, T = 12, B = 26;
    const pw = W - L - R, ph = H - T - B, n = shown.length;
    const x = (i) => L + (n === 1 ? pw / 2 : (i * pw) / (n - 1));
    const y = (v) => T + ((max - v) / (max - min)) * ph;
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-labelledby": "chart-t chart-d" });
    const desc = shown.map((s, i) => "session " + (i + 1) + " (" + shortDate(s.started_at) + "): " + s.mood_opened + " to " + s.mood_closed).join("; ");
    root.append(svg("title", { id: "chart-t" }, "Mood at the start and the end of your last " + n + (n === 1 ? " session" : " sessions")));
    root.append(svg("desc", { id: "chart-d" }, desc));
    for (const [v, label] of [[max, "good"], [0, "mixed"], [min, "struggling"]]) {
      root.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: v === 0 ? "zero" : "axis" }));
      root.append(svg("text", { x: L - 6, y: y(v) + 3, "text-anchor": "end", class: "tick" }, label));
    }
    const every = Math.ceil(n / 6);
    shown.forEach((s, i) => {
      const cx = x(i);
      const a = s.score_opened, b = s.score_closed;
      const has = (v) => typeof v === "number";
      const down = has(a) && has(b) && b < a;
      const g = svg("g", { class: "session", "data-index": i + 1 });
      if (has(a) && has(b)) g.append(svg("line", { x1: cx, x2: cx, y1: y(a), y2: y(b), class: "arc" + (down ? " down" : "") }));
      if (has(a)) g.append(svg("circle", { cx, cy: y(a), r: 5, class: "dot-open" }));
      if (has(b)) g.append(svg("circle", { cx, cy: y(b), r: 5, class: "dot-close" + (down ? " down" : "") }));
      if (!has(a) && !has(b)) g.append(svg("text", { x: cx, y: y(0) + 4, "text-anchor": "middle", class: "tick" }, "?"));
      root.append(g);
      if (i % every === 0 || i === n - 1) root.append(svg("text", { x: cx, y: H - 8, "text-anchor": "middle", class: "tick" }, shortDate(s.started_at)));
    });
    c.append(root);
    c.append(el("p", { class: "legend", text: "Hollow dot: mood when a session opened. Filled dot: when it closed." }));
    const list = el("ol", { class: "arcs", "aria-label": "Mood per session" });
    for (const s of shown) list.append(el("li", { text: shortDate(s.started_at) + ": " + s.mood_opened + " → " + s.mood_closed }));
    c.append(list);
  }

  async function refreshProgress() {
    try {
      const p = await api("GET", "/api/memory/progress");
      drawChart(p.sessions || [], p.mood_scale);
      const ul = $("exercises");
      ul.textContent = "";
      const ex = p.exercises_completed || [];
      if (!ex.length) ul.append(el("li", { class: "muted", text: "None yet. Ask for one, for example \"a breathing exercise\"." }));
      for (const e of ex) ul.append(el("li", { text: e.name + " × " + e.count }));
    } catch (e) {
      if (e.status !== 401) { $("chart").textContent = "Progress is unavailable: " + e.message; }
    }
  }

  // ---------- safety plan ----------
  const PLAN_SECTIONS = ["warning_signs", "coping", "distractions", "people", "professionals", "safe_environment", "reasons_to_live"];
  const PLAN_TITLES = {
    warning_signs: "My warning signs", coping: "Things I can do on my own",
    distractions: "People and places that help me take my mind off things",
    people: "People I can ask for help", professionals: "Professionals and services I can contact",
    safe_environment: "Making my surroundings safer", reasons_to_live: "My reasons for living",
  };
  function planStatus(text) { $("plan-status").textContent = text; }
  function contactLine(c) { return c.phone ? c.name + " " + c.phone : c.name; }
  // "my sister Ana +34 612 345 678" → {name, phone}: a trailing run of
  // phone characters with six digits or more is the number.
  function parseContact(line) {
    const m = /^(.*?)[\s:,–-]*([+(]?[0-9][0-9 ().+-]*)$/.exec(line);
    if (m && m[1].trim() && m[2].replace(/[^0-9]/g, "").length >= 6) return { name: m[1].trim(), phone: m[2].trim() };
    return { name: line };
  }
  function fillPlan(p) {
    for (const s of PLAN_SECTIONS) {
      const items = Array.isArray(p[s]) ? p[s] : [];
      $("plan-" + s).value = items.map((x) => (typeof x === "string" ? x : contactLine(x))).join("\n");
    }
  }
  function readPlan() {
    const plan = {};
    for (const s of PLAN_SECTIONS) {
      const box = $("plan-" + s);
      const lines = box.value.split("\n").map((l) => l.trim()).filter(Boolean);
      plan[s] = box.dataset.contacts ? lines.map(parseContact) : lines;
    }
    return plan;
  }
  async function refreshPlan() {
    try {
      fillPlan(await api("GET", "/api/safety-plan"));
      planStatus("");
    } catch (e) {
      if (e.status !== 401) planStatus("Your plan could not be loaded: " + e.message);
    }
  }
  async function savePlan() {
    if (S.incognito) { planStatus("Incognito is on: your safety plan is not changed."); return; }
    $("plan-save").disabled = true;
    try {
      fillPlan(await api("PUT", "/api/safety-plan", readPlan()));
      planStatus("Your safety plan is saved.");
    } catch (e) {
      planStatus("Not saved: " + e.message);
    } finally {
      $("plan-save").disabled = false;
    }
  }
  async function deletePlan() {
    if (!(await confirmDelete("Your safety plan will be deleted. You can write a new one any time."))) return;
    try {
      await api("DELETE", "/api/safety-plan");
      fillPlan({});
      planStatus("Your safety plan is deleted.");
    } catch (e) {
      planStatus("Not deleted: " + e.message);
    }
  }

  // ---------- "I need help now" ----------
  // No message is sent and no model is asked: the server answers the plan
  // and the verified lines for the country of the browser's language.
  function browserCountry() {
    for (const tag of navigator.languages || [navigator.language || ""]) {
      const m = /^[a-z]{2,3}-([A-Za-z]{2})\b/.exec(tag || "");
      if (m) return m[1].toUpperCase();
    }
    return "";
  }
  function renderPlan(plan) {
    const box = el("section", { class: "own-plan", "aria-label": "Your safety plan" }, el("h3", { text: "Your own safety plan" }));
    for (const s of PLAN_SECTIONS) {
      const items = Array.isArray(plan[s]) ? plan[s] : [];
      if (!items.length) continue;
      const ul = el("ul");
      for (const x of items) {
        if (typeof x === "string") { ul.append(el("li", { text: x })); continue; }
        const li = el("li", { text: x.name });
        if (x.phone) li.append(" ", el("a", { href: "tel:" + cleanNumber(x.phone), class: "tel", text: "Call " + x.phone + " (your number)" }));
        ul.append(li);
      }
      box.append(el("h4", { text: PLAN_TITLES[s] }), ul);
    }
    return box;
  }
  async function openSos() {
    const dlg = $("sos");
    const body = $("sos-body");
    body.textContent = "";
    body.append(el("p", { text: "Loading the lines for you…" }));
    if (!dlg.open) dlg.showModal();
    const country = browserCountry();
    let data;
    try {
      const r = await fetch("/api/sos" + (country ? "?country=" + country : ""), { headers: headers(false) });
      data = await r.json();
      if (!r.ok) throw new Error(data && data.message);
    } catch (e) {
      body.textContent = "";
      body.append(el("p", { class: "emergency", text: "If you are in immediate danger, call your local emergency number now." }),
        el("p", { text: "The list of lines could not be loaded. Findahelpline.com lists free, confidential lines for every country." }));
      return;
    }
    body.textContent = "";
    body.append(el("p", { class: "emergency", text: data.emergency_advice }));
    if (data.plan) body.append(renderPlan(data.plan));
    body.append(el("h3", { text: data.country_name ? "Verified lines in " + data.country_name : "Verified lines" }),
      resourceList(Array.isArray(data.resources) ? data.resources : []));
    $("sos-close").focus();
  }

  // ---------- incognito ----------
  function applyIncognito() {
    $("incognito").checked = S.incognito;
    $("incognito-help").hidden = !S.incognito;
    $("memory-off").hidden = !S.incognito;
    $("plan-off").hidden = !S.incognito;
    $("plan-save").disabled = S.incognito;
    $("plan-delete").disabled = S.incognito;
    document.body.classList.toggle("is-incognito", S.incognito);
  }

  // ---------- wiring ----------
  function wire() {
    $("signin").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = $("token").value.trim();
      $("token").value = "";
      if (t) signIn(t);
    });
    $("signout").addEventListener("click", () => signOut("You are signed out."));
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      const m = $("message").value.trim();
      if (!m || S.busy) return;
      $("message").value = "";
      send(m);
    });
    $("message").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
    });
    $("incognito").addEventListener("change", async (e) => {
      S.incognito = e.target.checked;
      store.setItem("oc.incognito", S.incognito ? "1" : "0");
      applyIncognito();
      $("summary").textContent = "";
      await restoreHistory();
    });
    $("new-thread").addEventListener("click", () => {
      resetThread();
      clearLog();
      $("summary").textContent = "";
      $("message").focus();
    });
    $("recall").addEventListener("change", async (e) => {
      const want = e.target.checked;
      try {
        const r = await api("PATCH", "/api/memory/recall", { enabled: want });
        setRecall(!!r.proactive_recall_enabled);
        say(r.proactive_recall_enabled ? "Proactive recall is on." : "Proactive recall is off.");
      } catch (err) {
        e.target.checked = !want;
        say("Could not change recall: " + err.message);
      }
    });
    $("sos-open").addEventListener("click", openSos);
    $("sos-close").addEventListener("click", () => { $("sos").close(); $("sos-open").focus(); });
    $("plan-form").addEventListener("submit", (e) => { e.preventDefault(); savePlan(); });
    $("plan-delete").addEventListener("click", deletePlan);
    $("end-open").addEventListener("click", () => toggleEndPanel($("end-panel").hidden));
    $("mic").addEventListener("click", () => { if (V.pc) stopVoice(true); else startVoice(); });
    setupSpeech();
    $("end-panel").addEventListener("keydown", (e) => { if (e.key === "Escape") { toggleEndPanel(false); $("end-open").focus(); } });
    for (const b of document.querySelectorAll("button.end")) b.addEventListener("click", () => endSession(b.dataset.feedback));
  }

  async function init() {
    wire();
    let h = {};
    try { h = await (await fetch("/api/health")).json(); } catch (e) { h = {}; }
    S.auth = h.auth === "local" ? "local" : "token";
    if (S.auth === "local") await showApp("Local mode: single user on this computer");
    else if (S.token) await signIn(S.token);
    else showSignin();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
