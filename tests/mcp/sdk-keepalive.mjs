// Progress that keeps clients alive, with the official SDK client at its default request
// timeout (60 s) and resetTimeoutOnProgress: a command that prints nothing for 90 s and a
// prepare whose dependency install is silent for 75 s (npm ci running a package's
// postinstall) both succeed, because `cae mcp` sends a progress notification while a call
// runs silent (every 5 s); without resetTimeoutOnProgress the same command times out, which
// shows that the timeout was really in force.
//
// usage: node sdk-keepalive.mjs /path/to/cae
// Needs tests/mcp/node_modules (scripts/npm-deps.sh). Exits 1 when any check fails.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { backendFromArgv, mcpClient } from "./backend.mjs";
import { check, finish } from "./tap.mjs";

const { cae } = backendFromArgv("sdk-keepalive.mjs");
const tmp = mkdtempSync(join(tmpdir(), "cae-keepalive-"));
const state = join(tmp, "state");

function repo(name, files) {
  const dir = join(tmp, name);
  execFileSync("mkdir", ["-p", dir]);
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text);
  const git = (...a) => execFileSync("git", a, { cwd: dir, stdio: "pipe" });
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first");
  return dir;
}
const plain = repo("plain", { "README": "plain\n" });
const slowPkg = { name: "slow", version: "1.0.0", private: true, scripts: { postinstall: "sleep 75" } };
const slow = repo("slow", {
  "package.json": JSON.stringify(slowPkg),
  "package-lock.json": JSON.stringify({
    name: "slow", version: "1.0.0", lockfileVersion: 3, requires: true,
    packages: { "": { name: "slow", version: "1.0.0", hasInstallScript: true } },
  }),
});

const config = join(tmp, "config.yaml");
writeFileSync(config, `command_executor:\n  local_repo_roots: [${JSON.stringify(tmp)}]\n`);
const { client, transport, stderrChunks } = mcpClient({ cae, backend: "local", state, config, name: "cae-keepalive-test" });

// callTool at the SDK's default timeout (no `timeout` given), progress resetting it
function call(name, args, onprogress, reset = true) {
  const opts = reset ? { onprogress, resetTimeoutOnProgress: true } : { onprogress };
  return client.callTool({ name, arguments: args }, undefined, opts);
}

async function main() {
  await client.connect(transport);
  let r = await call("environment_prepare", { task: { uuid: `ka-a-${process.pid}`, repo: plain } }, () => {});
  if (!check(r.isError !== true && r.structuredContent?.status === "ready", "prepare a plain project", r)) return;

  // 1. 90 s of silence from a command
  const seen = { cmd: [], prep: [] };
  let firstProgress;
  const started = new Promise((res) => { firstProgress = res; });
  const t0 = Date.now();
  const cmd = call("command-executor_execute_command", { command: "sleep 90; echo done" }, (p) => {
    seen.cmd.push({ t: Date.now() - t0, progress: p.progress });
    firstProgress();
  });
  await started; // the command runs in the first environment before the next prepare
  // 3. meanwhile, the timeout is real: without resetTimeoutOnProgress the SDK gives up at 60 s
  const bare = call("command-executor_execute_command", { command: "sleep 75" }, () => {}, false);
  // 2. meanwhile, a prepare whose dependency install is silent for 75 s
  const prep = call("environment_prepare", { task: { uuid: `ka-b-${process.pid}`, repo: slow } }, (p) => {
    seen.prep.push({ t: Date.now() - t0, progress: p.progress });
  });
  const [rc, rp, rb] = await Promise.allSettled([cmd, prep, bare]);
  const gap = (l) => l.reduce((m, x, i) => Math.max(m, i ? x.t - l[i - 1].t : x.t), 0);
  console.log(`# ${seen.cmd.length} progress notifications for the command (longest gap ${gap(seen.cmd)} ms), ` +
    `${seen.prep.length} for the prepare (longest gap ${gap(seen.prep)} ms)`);
  check(rc.status === "fulfilled" && rc.value.structuredContent?.exit_code === 0 &&
    rc.value.structuredContent?.stdout === "done\n", "a command silent for 90 s succeeds at the default 60 s timeout",
    rc.status === "fulfilled" ? rc.value : String(rc.reason));
  check(seen.cmd.every((x, i) => i === 0 || x.progress > seen.cmd[i - 1].progress), "its progress only increases", seen.cmd);
  const deps = rp.status === "fulfilled" ? rp.value.structuredContent?.deps : null;
  check(rp.status === "fulfilled" && rp.value.structuredContent?.status === "ready" &&
    Array.isArray(deps) && deps.some((d) => d.command === "npm ci" && d.success && d.duration_ms >= 60000),
    "a prepare whose install is silent for 75 s succeeds at the default 60 s timeout",
    rp.status === "fulfilled" ? rp.value.structuredContent : String(rp.reason));
  check(seen.prep.every((x, i) => i === 0 || x.progress > seen.prep[i - 1].progress), "the prepare's progress only increases", seen.prep);
  check(rb.status === "rejected" && /timed out|timeout|-32001/i.test(String(rb.reason?.message ?? rb.reason)),
    "without resetTimeoutOnProgress a silent call times out at 60 s (the timeout is in force)",
    rb.status === "rejected" ? String(rb.reason) : rb.value);
}

try {
  await main();
} catch (e) {
  check(false, "the keep-alive scenario ran", String(e?.stack ?? e));
} finally {
  await client.close().catch(() => {});
  const err = Buffer.concat(stderrChunks).toString();
  if (process.exitCode || /"level":"error"/.test(err)) console.log(`# cae stderr: ${err.slice(0, 2000)}`);
  rmSync(tmp, { recursive: true, force: true });
}
finish();
