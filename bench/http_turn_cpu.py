#!/usr/bin/env python3
"""Server CPU per turn of `opencouch serve` over HTTP, measured from outside.

Starts `opencouch serve` on a fresh data directory against an
OpenAI-compatible model server (the peer's fake, ../shared/bench/peer/
fake_openai.py, or any other), waits for /api/health, runs warm-up turns,
then N turns of `POST /api/chat` from C client threads (each its own
conversation: one thread id, turns one after another; the peer's eight
messages rotate), and reports:

- turns/s and wall ms per turn (p50, p99) as the clients saw them;
- the server process's CPU ms per measured turn (utime + stime of every
  thread, from /proc/PID/stat, read before and after the measured turns);
- the server's RSS after the run and its peak (VmRSS / VmHWM);
- with the peer's fake, the model requests per turn (from its /stats).

Standard library only. Linux only (/proc).

    python3 bench/http_turn_cpu.py --bin target/release/opencouch \\
        --model-url http://127.0.0.1:18181/v1 --turns 2000 --concurrency 1 --memory-mode incognito
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

MESSAGES = [
    "I had a long day at work and feel tired",
    "my exams are next week and I'm stressed",
    "I keep arguing with my sister",
    "I can't sleep well lately",
    "work has been piling up and I feel behind",
    "I feel lonely since I moved to a new city",
    "the house feels so quiet without him",
    "I'm nervous about a job interview tomorrow",
]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 (1-based) of the whole line.
    return int(fields[11]) + int(fields[12])


def rss_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out


def model_stats(model_url):
    base = model_url.rsplit("/v1", 1)[0]
    try:
        with urllib.request.urlopen(base + "/stats", timeout=2) as r:
            return json.load(r)
    except Exception:
        return None


def requests_in(stats):
    if not stats:
        return None
    for key in ("requests", "total_requests", "request_count"):
        if isinstance(stats.get(key), int):
            return stats[key]
    counts = stats.get("counts") or stats.get("requests_by_path")
    if isinstance(counts, dict):
        return sum(v for v in counts.values() if isinstance(v, int))
    return None


def wait_healthy(port, deadline):
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/api/health")
            if conn.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.01)
    return False


def client(port, conv, turns, mode, latencies, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    thread = f"bench-{conv}-{os.getpid()}"
    for i in range(turns):
        body = json.dumps(
            {"message": MESSAGES[(conv + i) % len(MESSAGES)], "thread_id": thread, "memory_mode": mode}
        )
        started = time.perf_counter()
        conn.request("POST", "/api/chat", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        latencies.append((time.perf_counter() - started) * 1000.0)
        if resp.status != 200:
            errors.append(f"{resp.status}: {data[:200]!r}")
            return
        out = json.loads(data)
        if out.get("diagnostics", {}).get("openai_sdk_fallback_reason"):
            errors.append("a deterministic fallback answered: " + out["diagnostics"]["openai_sdk_fallback_reason"])
            return


def run_turns(port, total, concurrency, mode):
    latencies, errors, threads = [], [], []
    per = [total // concurrency + (1 if c < total % concurrency else 0) for c in range(concurrency)]
    for c, n in enumerate(per):
        t = threading.Thread(target=client, args=(port, c, n, mode, latencies, errors))
        threads.append(t)
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, latencies, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the opencouch binary")
    ap.add_argument("--model-url", required=True, help="OPENAI_BASE_URL of the model server")
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--memory-mode", choices=["incognito", "persistent"], default="incognito")
    ap.add_argument("--port", type=int, default=18932)
    ap.add_argument("--database-url", help="PostgreSQL instead of the embedded SQLite file")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    data_dir = tempfile.mkdtemp(prefix="oc-http-bench-")
    env = dict(os.environ, OPENAI_BASE_URL=args.model_url, OPENAI_API_KEY=os.environ.get("OPENAI_API_KEY", "sk-fake"))
    env.setdefault("RUST_LOG", "warn")
    cmd = [args.bin, "serve", "--listen", f"127.0.0.1:{args.port}", "--mode", "hybrid", "--data-dir", data_dir]
    if args.database_url:
        cmd += ["--database-url", args.database_url]
    # The rate limit would refuse a benchmark's traffic.
    env["OPENCOUCH_RATE_LIMIT_PER_MINUTE"] = "0"
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not wait_healthy(args.port, time.monotonic() + 30):
            server.kill()
            sys.exit("the server did not answer /api/health: " + server.stderr.read().decode(errors="replace")[-2000:])
        _, _, errors = run_turns(args.port, args.warmup, min(args.concurrency, max(args.warmup, 1)), args.memory_mode)
        if errors:
            sys.exit("warm-up failed: " + errors[0])
        time.sleep(0.5)  # background memory extraction of the warm-up settles
        stats0 = model_stats(args.model_url)
        cpu0 = cpu_ticks(server.pid)
        wall, latencies, errors = run_turns(args.port, args.turns, args.concurrency, args.memory_mode)
        if args.memory_mode == "persistent":
            time.sleep(0.5)  # the last turns' background extraction counts too
        cpu1 = cpu_ticks(server.pid)
        stats1 = model_stats(args.model_url)
        if errors:
            sys.exit(f"{len(errors)} turn(s) failed; first: {errors[0]}")
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        mem = rss_kib(server.pid)
        latencies.sort()
        result = {
            "turns": args.turns,
            "concurrency": args.concurrency,
            "memory_mode": args.memory_mode,
            # Incognito turns never touch the database: the runtime keeps them in memory.
            "store": "memory" if args.memory_mode == "incognito" else ("postgres" if args.database_url else "sqlite"),
            "turns_per_s": round(args.turns / wall, 1),
            "wall_ms_p50": round(statistics.median(latencies), 3),
            "wall_ms_p99": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 3),
            "server_cpu_ms_per_turn": round((cpu1 - cpu0) * tick_ms / args.turns, 3),
            "server_rss_mib": round(mem.get("VmRSS", 0) / 1024, 1),
            "server_peak_rss_mib": round(mem.get("VmHWM", 0) / 1024, 1),
        }
        r0, r1 = requests_in(stats0), requests_in(stats1)
        if r0 is not None and r1 is not None:
            result["model_requests_per_turn"] = round((r1 - r0) / args.turns, 3)
        if args.json:
            print(json.dumps(result))
        else:
            for k, v in result.items():
                print(f"{k:<24} {v}")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
