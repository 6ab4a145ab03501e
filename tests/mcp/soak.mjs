// The many-tasks soak: CYCLES (default 200) cycles of environment_prepare → 5 commands →
// environment_cleanup, PARALLEL (default 8) at a time, each worker one `cae mcp` driven by the
// official MCP SDK client on the docker backend. Afterwards: no container, process, open file
// or state file more than before, and each `cae mcp`'s resident memory flat after its first
// cycles. Prints the counts before and after.
//
// usage: node soak.mjs /path/to/cae [CYCLES] [PARALLEL]
// Needs an engine with the test image (scripts/docker-env.sh up). Exits 1 when a check fails.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { check, finish, tap } from "./tap.mjs";

const cae = process.argv[2] ? resolve(process.argv[2]) : null;
const cycles = Number(process.argv[3] ?? process.env.CAE_SOAK_CYCLES ?? 200);
const parallel = Number(process.argv[4] ?? process.env.CAE_SOAK_PARALLEL ?? 8);
if (!cae || !existsSync(cae) || !(cycles > 0) || !(parallel > 0)) {
  console.error("usage: node soak.mjs /path/to/cae [CYCLES] [PARALLEL]");
  process.exit(2);
}


const tag = `soak-${process.pid}`;
const tmp = mkdtempSync(join(tmpdir(), "cae-soak-"));
const state = join(tmp, "state");
const repo = join(tmp, "repo");
execFileSync("mkdir", ["-p", state, repo]);
const git = (...args) => execFileSync("git", args, { cwd: repo, stdio: "pipe" });
git("init", "-q", "-b", "main");
writeFileSync(join(repo, "main.py"), "print('soak')\n");
git("add", "main.py");
git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first");
const config = join(tmp, "config.yaml");
writeFileSync(config, `command_executor:\n  local_repo_roots: [${JSON.stringify(tmp)}]\n  docker:\n    network:\n      mode: host\n`);

// What the soak may leave behind, counted.
function containers() {
  const out = execFileSync("docker", ["ps", "-aq", "--filter", `name=coding-agent-exec-${tag}`], { encoding: "utf8" });
  return out.split("\n").filter(Boolean).length;
}
// Files under the state directory, but the engine slots' lock files: made once, at most
// docker.max_concurrent_engine_ops (4) of them, counted on their own.
function stateFiles(dir = state) {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (dir === state && e.name === "engine-slots") continue;
    n++;
    if (e.isDirectory()) n += stateFiles(join(dir, e.name));
  }
  return n;
}
const slotFiles = () => existsSync(join(state, "engine-slots")) ? readdirSync(join(state, "engine-slots")).length : 0;
function parentOf(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "latin1");
    return Number(s.slice(s.lastIndexOf(")") + 2).split(" ")[1]);
  } catch { return 0; }
}
// Processes below the given ones (their descendants), this process's aside.
function descendants(roots) {
  const set = new Set(roots);
  let n = 0;
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    for (let q = Number(p), hops = 0; q > 1 && hops < 64; q = parentOf(q), hops++)
      if (set.has(q) && q !== Number(p)) { n++; break; }
  }
  return n;
}
const fds = (pid) => { try { return readdirSync(`/proc/${pid}/fd`).length; } catch { return -1; } };
const rssKiB = (pid) => {
  try { return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]); } catch { return -1; }
};
const sc = (r) => r.structuredContent ?? {};

async function worker(w, todo) {
  const transport = new StdioClientTransport({
    command: cae,
    args: ["mcp", "--backend", "docker", "--state-dir", state],
    env: { ...process.env, CAE_CONFIG: config, CAE_LOG_LEVEL: "error" },
    stderr: "pipe",
  });
  const err = [];
  transport.stderr?.on("data", (d) => err.push(d));
  const client = new Client({ name: `cae-soak-${w}`, version: "1.0.0" });
  await client.connect(transport);
  const pid = transport.pid;
  const call = (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 600000 });
  const rec = { pid, fds: [], rss: [], children: [], errors: 0 };
  for (let i = 0; i < todo; i++) {
    const uuid = `${tag}-${w}-${i}`;
    let r = await call("environment_prepare", { task: { uuid, repo } });
    if (r.isError || sc(r).status !== "ready") {
      rec.errors++;
      check(false, `prepare ${uuid}`, r);
      continue;
    }
    for (let k = 0; k < 5; k++) {
      r = await call("exec_command", { cwd: ".", command: ["python3", "main.py"], shell_mode: "direct" });
      if (sc(r).exit_code !== 0 || sc(r).stdout !== "soak\n") { rec.errors++; check(false, `command ${uuid}`, r); }
    }
    r = await call("environment_cleanup", { task_uuid: uuid });
    if (r.isError) { rec.errors++; check(false, `cleanup ${uuid}`, r); }
    rec.fds.push(fds(pid));
    rec.rss.push(rssKiB(pid));
    rec.children.push(descendants([pid]));
  }
  await client.close();
  if (rec.errors) process.stderr.write(Buffer.concat(err).toString().slice(-2000));
  return rec;
}

// One cycle first: what the first use makes once (the engine slots' lock files, bounded by
// docker.max_concurrent_engine_ops) is not a leak.
check((await worker("warm-up", 1)).errors === 0, "a first cycle");
const before = { containers: containers(), stateFiles: stateFiles(), fds: fds(process.pid) };
console.log(`# before: containers ${before.containers}, state files ${before.stateFiles} (and ${slotFiles()} engine slot locks), this process's fds ${before.fds}`);
const per = Array.from({ length: parallel }, (_, w) => Math.floor(cycles / parallel) + (w < cycles % parallel ? 1 : 0));
const t0 = Date.now();
const recs = await Promise.all(per.map((n, w) => worker(w, n)));
const after = { containers: containers(), stateFiles: stateFiles(), fds: fds(process.pid) };
console.log(`# after ${cycles} cycles, ${parallel} at a time, in ${((Date.now() - t0) / 1000).toFixed(1)} s: containers ${after.containers}, state files ${after.stateFiles} (and ${slotFiles()} engine slot locks), this process's fds ${after.fds}`);
check(recs.every((r) => r.errors === 0), `all ${cycles} cycles succeeded`);
check(after.containers <= before.containers, "no container left", after);
check(after.stateFiles <= before.stateFiles, "no state file left", { before, after });
check(slotFiles() <= 4, `the engine slots' lock files stay within their bound (${slotFiles()})`);
check(after.fds <= before.fds, "no descriptor of the client left", { before, after });
for (const [w, r] of recs.entries()) {
  const n = r.fds.length;
  if (n < 3) continue;
  // after the first cycles (lazily opened libraries, the engine connections libcurl keeps
  // for reuse: a few, however many cycles ran, so a descriptor or memory lost per cycle shows)
  const fdGrowth = r.fds[n - 1] - r.fds[1];
  const rssGrowth = r.rss[n - 1] - r.rss[1];
  console.log(`# cae mcp ${w}: fds ${r.fds[0]} → ${r.fds[1]} → ${r.fds[n - 1]}, RSS ${r.rss[0]} → ${r.rss[1]} → ${r.rss[n - 1]} KiB, processes below it after a cycle: max ${Math.max(...r.children)}`);
  check(fdGrowth <= 4, `cae mcp ${w}: descriptors flat (${fdGrowth >= 0 ? "+" : ""}${fdGrowth})`, r.fds);
  check(rssGrowth <= 2048, `cae mcp ${w}: resident memory flat (grew ${rssGrowth} KiB)`, r.rss);
  check(r.children.every((c) => c === 0), `cae mcp ${w}: no process left below it after a cycle`, r.children);
}
if (!process.env.CAE_SOAK_KEEP) rmSync(tmp, { recursive: true, force: true });
else console.log(`# kept ${tmp}`);
finish();
