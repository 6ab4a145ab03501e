// Process sessions and live output through `cae mcp`, driven by the official MCP TypeScript
// SDK client, on the backend named by argv[3] (local, docker or kubernetes; meson runs it for
// each): a dev server started in a session answers the environment's later commands on
// loopback and is gone after environment_cleanup; a Python REPL driven through stdin and
// interrupted with SIGINT; a session whose output passes its buffer reports the drop; progress notifications arrive while a long
// command runs and the result is unchanged; a session's command is gone after its manager is
// killed with SIGKILL.
//
// usage: node sdk-sessions.mjs /path/to/cae local|docker|kubernetes
// Needs tests/mcp/node_modules (scripts/npm-deps.sh); docker needs an engine with the test
// image (scripts/docker-env.sh up); kubernetes the cluster of scripts/k8s-env.sh with
// CAE_TEST_K8S=1 and its KUBECONFIG (without CAE_TEST_K8S it exits 77, skipped, as the
// conformance suite's kubernetes run does). Exits 1 when any check fails.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { backendFromArgv, backendYaml, mcpClient } from "./backend.mjs";
import { check, finish, tap } from "./tap.mjs";

const { cae, backend } = backendFromArgv("sdk-sessions.mjs");


// Whether a process of this host (a container's are visible here too) has token in its
// command line.
function hostProcessWith(token) {
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid) continue;
    let cmd;
    try { cmd = readFileSync(`/proc/${pid}/cmdline`, "latin1").replaceAll("\0", " "); } catch { continue; }
    if (cmd.includes(token)) return true;
  }
  return false;
}

const tmp = mkdtempSync(join(tmpdir(), "cae-sessions-"));
const state = join(tmp, "state");
const repo = join(tmp, "repo");
execFileSync("mkdir", ["-p", state, repo]);
const git = (...args) => execFileSync("git", args, { cwd: repo, stdio: "pipe" });
git("init", "-q", "-b", "main");
writeFileSync(join(repo, "index.html"), "served-from-a-session\n");
git("add", "index.html");
git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first");

// A pod cannot reach a path of this host: kubernetes clones from the loopback git server.
const gitServer = resolve(new URL("../../scripts/git-server.sh", import.meta.url).pathname);
let repoArg = repo;
if (backend === "kubernetes") {
  execFileSync("mkdir", ["-p", join(tmp, "srv")]);
  execFileSync("git", ["clone", "-q", "--bare", repo, join(tmp, "srv", "repo.git")]);
  const out = execFileSync(gitServer, ["start", join(tmp, "srv")], { encoding: "utf8" });
  const url = /GIT_DAEMON_URL=(\S+)/.exec(out)?.[1];
  if (!url) throw new Error(`git-server.sh: ${out}`);
  repoArg = `${url}repo.git`;
}

const port = 21000 + (process.pid % 20000);
const config = join(tmp, "config.yaml");
let yaml = `command_executor:\n  local_repo_roots: [${JSON.stringify(tmp)}]\n  sessions:\n    buffer_size: 65536\n`;
yaml += backendYaml(backend);
writeFileSync(config, yaml);

const { client, transport, stderrChunks } = mcpClient({ cae, backend, state, config, name: "cae-sdk-sessions-test" });
const call = (name, args, opts) => client.callTool({ name, arguments: args }, undefined, { timeout: 180000, ...opts });
const sc = (r) => r.structuredContent ?? {};

// Reads a session until its output so far contains want (or it ended); returns all of it.
async function readUntil(id, want) {
  let all = "";
  for (let i = 0; i < 90 && !all.includes(want); i++) {
    const r = await call("process_read", { session_id: id, wait_ms: 2000 });
    if (!check(r.isError !== true, `process_read ${id}`, r)) break;
    all += sc(r).output;
    if (sc(r).state !== "running" && !sc(r).more) break;
  }
  return all;
}

async function main() {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ["process_start", "process_read", "process_write", "process_wait", "process_kill", "process_list"])
    check(names.includes(n), `tools/list offers ${n}`, names);
  const start = tools.find((t) => t.name === "process_start");
  check(/outlive/.test(start?.description ?? "") && /never outlives/.test(start?.description ?? ""),
    "process_start says what a session is and that it never outlives its environment", start?.description);

  const uuid = `sessions-${backend}-${process.pid}`;
  let r = await call("environment_prepare", { task: { uuid, repo: repoArg } });
  if (!check(r.isError !== true && sc(r).status === "ready", `environment_prepare on ${backend}`, r)) return;

  // A dev server, across calls.
  const marker = `http.server ${port}`;
  r = await call("process_start", { command: `exec python3 -u -m http.server ${port} --bind 127.0.0.1`, wait_ms: 0 });
  check(r.isError !== true && sc(r).state === "running" && /^p\d+$/.test(sc(r).session_id), "process_start: a dev server", r);
  const server = sc(r).session_id;
  const banner = await readUntil(server, "Serving HTTP");
  check(banner.includes("Serving HTTP"), "the server's output is read incrementally", banner);
  r = await call("command-executor_execute_command", {
    command: `python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:${port}/index.html').read().decode(), end='')"`,
  });
  check(sc(r).exit_code === 0 && sc(r).stdout === "served-from-a-session\n", "a later command reaches the server on loopback", r);
  const log = await readUntil(server, "GET /index.html");
  check(log.includes("GET /index.html"), "the server's request log arrives in later reads", log);
  check(hostProcessWith(marker), "the server process runs");

  // A Python REPL through stdin.
  // exec: the REPL is the session's command itself, so that an interrupt reaches it alone
  // (sh -c, waiting for it, would take the signal too and exit 130 when the REPL exits).
  r = await call("process_start", { command: "exec python3 -i -q", wait_ms: 500 });
  check(r.isError !== true && sc(r).state === "running", "process_start: a Python REPL", r);
  const repl = sc(r).session_id;
  r = await call("process_write", { session_id: repl, input: "print(6 * 7)\n" });
  check(r.isError !== true && sc(r).written_bytes === 13, "process_write to the REPL", r);
  let out = await readUntil(repl, "42");
  check(out.includes("42"), "the REPL answers", out);
  await call("process_write", { session_id: repl, input: "x = 20\nprint(x + 3)\n" });
  out = await readUntil(repl, "23");
  check(out.includes("23"), "the REPL keeps its state between writes", out);
  // An interrupt, as a terminal's Ctrl-C: the running statement stops, the REPL goes on.
  await call("process_write", { session_id: repl, input: "import time\nprint('slee' + 'ping', flush=True); time.sleep(600)\n" });
  out = await readUntil(repl, "sleeping");
  check(out.includes("sleeping"), "the REPL runs a long statement", out);
  r = await call("process_kill", { session_id: repl, signal: "INT" });
  check(r.isError !== true && sc(r).signal_sent === true && sc(r).state === "running", "process_kill with signal INT: sent, the REPL runs on", r);
  out = await readUntil(repl, "KeyboardInterrupt");
  check(out.includes("KeyboardInterrupt"), "the REPL's statement is interrupted", out);
  await call("process_write", { session_id: repl, input: "print(x * 2)\n" });
  out = await readUntil(repl, "40");
  check(out.includes("40"), "the REPL keeps its state after the interrupt", out);
  r = await call("process_write", { session_id: repl, input: "import sys; sys.exit(5)\n", close_stdin: true });
  check(r.isError !== true, "process_write with close_stdin", r);
  r = await call("process_wait", { session_id: repl, timeout_ms: 60000 });
  check(sc(r).state === "exited" && sc(r).exit_code === 5, "process_wait: the REPL's exit code", r);

  // Output past the buffer (65536 here): the drop is reported, the newest kept.
  r = await call("process_start", { command: "python3 -c \"print('a' * 300000)\"; echo END", wait_ms: 0 });
  const big = sc(r).session_id;
  r = await call("process_wait", { session_id: big, timeout_ms: 60000, max_chars: 200000 });
  const o = sc(r).output ?? "";
  check(sc(r).state === "exited" && sc(r).dropped_bytes > 0 && o.endsWith("END\n") && o.length <= 65536 &&
    o.length + sc(r).dropped_bytes === 300001 + 4, "a session past its buffer reports the drop", { ...sc(r), output: o.length });

  // process_list
  r = await call("process_list", {});
  const listed = (sc(r).sessions ?? []).map((s) => `${s.session_id}:${s.state}`);
  check(listed.includes(`${server}:running`) && listed.includes(`${repl}:exited`), "process_list: states", sc(r));

  // Live output of a long command as progress; the result unchanged.
  const live = [];
  r = await call("command-executor_execute_command",
    { command: "for i in 1 2 3 4; do echo tick-$i; sleep 1; done" }, { onprogress: (p) => live.push(p) });
  check(sc(r).stdout === "tick-1\ntick-2\ntick-3\ntick-4\n", "a long command's result is unchanged", sc(r));
  check(live.length >= 2 && /tick-1/.test(live[0].message ?? ""), "progress notifications arrive while it runs", live);

  // Cleanup ends the sessions: the server is gone.
  r = await call("environment_cleanup", { task_uuid: uuid });
  check(r.isError !== true, "environment_cleanup", r);
  r = await call("process_read", { session_id: server });
  check(sc(r).state === "killed", "the server's session ended with its environment", r);
  check(!hostProcessWith(marker), "no server process is left");
}

// A manager killed with SIGKILL (no cleanup of its own runs): the session's command does not
// outlive it — the sandbox's helper dies with it (local), the container's or pod's helper
// cancels what its stream ran when the stream ends. The environment stays, as any killed
// manager's does, and is removed afterwards with `cae cleanup`.
async function killedManager() {
  const { client: c2, transport: t2 } =
    mcpClient({ cae, backend, state, config, name: "cae-sdk-sessions-killed", logLevel: "error" });
  await c2.connect(t2);
  const uuid2 = `sessions-killed-${backend}-${process.pid}`;
  const marker2 = "605.25";
  try {
    let r = await c2.callTool({ name: "environment_prepare", arguments: { task: { uuid: uuid2, repo: repoArg } } }, undefined, { timeout: 180000 });
    if (!check(r.isError !== true, "a second manager prepares", r)) return;
    r = await c2.callTool({ name: "process_start", arguments: { command: `echo up; sleep ${marker2}`, wait_ms: 30000 } });
    check(sc(r).output === "up\n", "its session runs", r);
    check(hostProcessWith(marker2), "the session's command is on this host");
    process.kill(t2.pid, "SIGKILL");
    let gone = false;
    for (let i = 0; i < 120 && !gone; i++) {
      gone = !hostProcessWith(marker2);
      if (!gone) await new Promise((res) => setTimeout(res, 500));
    }
    check(gone, "after SIGKILL of its manager, the session's command is gone");
  } finally {
    await c2.close().catch(() => {});
    execFileSync(cae, ["cleanup", "--uuid", uuid2, "--backend", backend, "--state-dir", state],
      { env: { ...process.env, CAE_CONFIG: config, CAE_LOG_LEVEL: "error" }, stdio: "pipe" });
  }
}

try {
  await main();
  await killedManager();
} catch (e) {
  check(false, "no exception", String(e?.stack ?? e));
} finally {
  await client.close().catch(() => {});
  if (backend === "kubernetes") {
    try { execFileSync(gitServer, ["stop", join(tmp, "srv")]); } catch {}
  }
  rmSync(tmp, { recursive: true, force: true });
}
if (tap.failed) process.stderr.write(Buffer.concat(stderrChunks).toString().slice(-4000));
finish();
