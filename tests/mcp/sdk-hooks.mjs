// Nothing an agent writes into .git runs in cae's own git steps, through `cae mcp` driven by
// the official MCP TypeScript SDK client, on the backend named by argv[3] (meson runs it for
// local, docker and kubernetes):
//   (a) command_executor.protected_paths (default .git/hooks) is read-only to commands and
//       the text editor: writing pre-commit, post-commit or pre-push there, renaming or
//       removing the directory or .git, linking over it, all fail, and no hook is there
//       after;
//   (b) what an agent can plant another way — core.hooksPath (a directory with pre-commit,
//       commit-msg, post-commit and pre-push hooks), core.fsmonitor, core.sshCommand and a
//       credential.helper, set in the repository through commands — does not run in cae's
//       auto-commit (apply_patch with auto_commit), and the repository's credential helper
//       does not run in a push (cae's is the only one); each planted program writes a marker
//       next to itself (in the environment) and into a directory of this host, and neither
//       has one after;
//   (c) the agent's own git config, commit and push work.
// cae has no push of its own: a push is the agent's own `git push`, which runs the hooks the
// agent's own configuration names (it is its command, as docs/security.md says): that pre-push hook
// running there is checked as the proof that the planted hooks do run when git is let to,
// and so that their silence in cae's steps means something; so are the agent's own commit
// (pre-commit, commit-msg, post-commit) and status (fsmonitor).
//
// usage: node sdk-hooks.mjs /path/to/cae local|docker|kubernetes
// Needs tests/mcp/node_modules (scripts/npm-deps.sh) and the loopback git server
// (scripts/git-server.sh: smart HTTP with a token, which every backend reaches: the local
// sandbox with its network on, containers and pods on the host network); docker needs an
// engine with the test images (scripts/docker-env.sh up); kubernetes the cluster of
// scripts/k8s-env.sh with CAE_TEST_K8S=1 and its KUBECONFIG (without CAE_TEST_K8S it exits
// 77, skipped). Exits 1 when any check fails.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { backendFromArgv, backendYaml, mcpClient } from "./backend.mjs";
import { check, finish, tap } from "./tap.mjs";

const { cae, backend } = backendFromArgv("sdk-hooks.mjs");

const tmp = mkdtempSync(join(tmpdir(), "cae-hooks-"));
const state = join(tmp, "state");
const repo = join(tmp, "repo");
const srv = join(tmp, "srv");
// where a planted program would leave its marker if it ran on this host
const hostMarks = join(tmp, "host-marks");
execFileSync("mkdir", ["-p", state, repo, srv, hostMarks]);
const git = (...args) => execFileSync("git", args, { cwd: repo, stdio: "pipe", encoding: "utf8" });
git("init", "-q", "-b", "main");
writeFileSync(join(repo, "README.md"), "hooks\n");
git("add", "README.md");
git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first");
execFileSync("git", ["clone", "-q", "--bare", repo, join(srv, "repo.git")]);

const gitServer = resolve(new URL("../../scripts/git-server.sh", import.meta.url).pathname);
const out = execFileSync(gitServer, ["start", srv], { encoding: "utf8" });
const httpUrl = /GIT_HTTP_URL=(\S+)/.exec(out)?.[1];
const token = /GIT_HTTP_TOKEN=(\S+)/.exec(out)?.[1];
if (!httpUrl || !token) throw new Error(`git-server.sh: ${out}`);
const repoArg = `${httpUrl}repo.git`;

const config = join(tmp, "config.yaml");
let yaml = "command_executor:\n";
if (backend === "local") yaml += "  local:\n    network: true\n";
yaml += backendYaml(backend);
yaml += `github:\n  token: ${JSON.stringify(token)}\n`;
writeFileSync(config, yaml);

const { client, transport, stderrChunks } = mcpClient({ cae, backend, state, config, name: "cae-sdk-hooks-test" });
const call = (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 300000 });
const sc = (r) => r.structuredContent ?? {};
const sh = (command) => call("command-executor_execute_command", { command });

// The planted programs: each appends its name to MARKS in the planted directory, found
// from its own path (so wherever it runs: the environment, or this host for a step cae would
// run here), and to the host's directory (which exists only on this host). The
// configuration names them relative to the work tree, as git resolves them there.
const PLANT = "/workspace/project/.git/planted";
const REL = ".git/planted";
const mark = (name, up) =>
  `#!/bin/sh\necho ${name} >> "$(dirname "$0")/${up}MARKS" 2>/dev/null; echo ${name} >> ${hostMarks}/MARKS 2>/dev/null; ` +
  (name === "fsmonitor" ? "printf '\\0'\n" : "exit 0\n");
const hookNames = ["pre-commit", "commit-msg", "post-commit", "pre-push"];

async function envMarks() {
  const r = await sh(`cat ${PLANT}/MARKS 2>/dev/null; true`);
  return sc(r).stdout ?? "";
}
const hostMarksNow = () => (readdirSync(hostMarks).length ? "host has markers" : "");

async function main() {
  await client.connect(transport);
  const uuid = `hooks-${backend}-${process.pid}`;
  let r = await call("environment_prepare", { task: { uuid, repo: repoArg, platform: "github" } });
  if (!check(r.isError !== true && sc(r).status === "ready", `environment_prepare on ${backend}`, r)) return;
  check(!(sc(r).warnings ?? []).some((w) => /protected_paths/.test(w)),
    "no warning that protected paths are not enforced", sc(r).warnings);

  // (a) .git/hooks is read-only to commands and the editor
  const attacks = [
    "echo 'touch /tmp/pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "echo 'touch /tmp/pwned' > .git/hooks/post-commit",
    "echo 'touch /tmp/pwned' > .git/hooks/pre-push",
    "cp .git/hooks/pre-commit.sample .git/hooks/pre-commit",
    "mv .git/hooks .git/h2 && mkdir .git/hooks && echo x > .git/hooks/pre-commit",
    "mv .git .g && mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
    "rm -rf .git/hooks; mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
    "ln -s /tmp/x .git/hooks/pre-commit",
    "mkdir -p /tmp/h && echo x > /tmp/h/pre-commit && ln -sfn /tmp/h .git/hooks && test -e .git/hooks/pre-commit",
    "chmod u+w .git/hooks && echo x > .git/hooks/pre-commit",
  ];
  for (const a of attacks) {
    r = await sh(a);
    check(sc(r).exit_code !== 0, `a command cannot: ${a}`, sc(r));
    r = await sh("ls -a .git/hooks | grep -v sample | tr '\\n' ' '; test -d .git/hooks && test ! -L .git/hooks && echo dir");
    check(sc(r).stdout === ". .. dir\n", `after "${a}": no hook in .git/hooks`, sc(r));
    await sh("rm -rf .g .git/h2 /tmp/h; git checkout -q -- . 2>/dev/null; true");
  }
  for (const path of [".git/hooks/pre-commit", "/workspace/project/.git/./hooks/post-commit"]) {
    r = await call("text_editor", { command: "create", path, file_text: "#!/bin/sh\ntouch /tmp/pwned\n" });
    check(r.isError === true, `the editor cannot create ${path}`, r);
  }
  r = await sh("test ! -e .git/hooks/pre-commit && test ! -e .git/hooks/post-commit && echo none");
  check(sc(r).stdout === "none\n", "no hook was made by the editor", sc(r));

  // (c) the agent's own git config and commit
  r = await sh("git config user.name agent && git config user.email agent@example.com && " +
    "echo mine > mine.txt && git add mine.txt && git commit -qm mine && git log -1 --format=%s%an");
  check(sc(r).exit_code === 0 && sc(r).stdout === "mineagent\n", "the agent's own git config and commit work", sc(r));

  // (b) plant hooks, fsmonitor, sshCommand and a credential helper through commands
  let plant = `set -e; mkdir -p ${PLANT}/hooks; cd ${PLANT}\n`;
  for (const h of hookNames) plant += `cat > hooks/${h} <<'EOF'\n${mark(h, "../")}EOF\n`;
  for (const p of ["fsmonitor", "ssh"]) plant += `cat > ${p} <<'EOF'\n${mark(p, "")}EOF\n`;
  plant += `chmod +x hooks/* fsmonitor ssh; cd /workspace/project\n` +
    `git config core.hooksPath ${REL}/hooks\n` +
    `git config core.fsmonitor ${REL}/fsmonitor\n` +
    `git config core.sshCommand ${REL}/ssh\n` +
    `git config credential.helper '!f() { echo credential >> ${PLANT}/MARKS; echo credential >> ${REL}/MARKS; echo credential >> ${hostMarks}/MARKS; }; f'\n` +
    "git config --get core.hooksPath && git config --get core.fsmonitor && git config --get credential.helper >/dev/null && echo planted\n";
  r = await sh(plant);
  check(sc(r).exit_code === 0 && /planted\n$/.test(sc(r).stdout), "hooks, fsmonitor, sshCommand and a credential helper planted by commands", sc(r));

  // cae's own auto-commit
  r = await call("apply_patch", { patch: "```text:autocommitted.txt\nmade by apply_patch\n```\n", auto_commit: true });
  const ap = sc(r);
  check(r.isError !== true && ap.success === true && ap.auto_commit === "committed" && /^[0-9a-f]{40}$/.test(ap.git_commit ?? ""),
    "apply_patch with auto_commit commits", ap);
  r = await sh("git log -1 --format=%H; git show --name-only --format= HEAD");
  check((sc(r).stdout ?? "").startsWith(`${ap.git_commit}\n`) && /autocommitted\.txt/.test(sc(r).stdout ?? ""),
    "the auto-commit is HEAD and holds the patch's file", sc(r));
  let m = await envMarks();
  check(m === "", "no planted hook, fsmonitor or ssh command ran in cae's auto-commit (in the environment)", m);
  check(hostMarksNow() === "", "... nor on this host", hostMarksNow());

  // a push: the agent's own git push, with cae's credential helper only
  const branch = `hooks-${backend}-${process.pid}`;
  r = await sh(`git push -q origin HEAD:refs/heads/${branch} 2>&1; echo rc=$?`);
  check(/rc=0\n$/.test(sc(r).stdout ?? ""), "the agent's git push succeeds (cae's credential helper)", sc(r));
  const pushed = execFileSync("git", ["--git-dir", join(srv, "repo.git"), "rev-parse", `refs/heads/${branch}`], { encoding: "utf8" }).trim();
  check(pushed === ap.git_commit, "the server has the auto-commit", { pushed, commit: ap.git_commit });
  m = await envMarks();
  check(!/credential|ssh/.test(m), "the repository's credential helper and ssh command did not run in the push", m);
  // what the agent's own commands run: its own configuration's hooks (the proof that the
  // planted programs run when git is let to)
  console.log("# the agent's own git push runs the pre-push hook its own core.hooksPath names: it is its command (docs/security.md)");
  check(m === "pre-push\n", "the agent's own push ran its pre-push hook (the planted hooks do run when git is let to)", m);
  await sh(`: > ${PLANT}/MARKS`);
  r = await sh("echo more >> mine.txt && git commit -qam more; git status --short >/dev/null; echo rc=$?");
  m = await envMarks();
  for (const h of ["pre-commit", "commit-msg", "post-commit", "fsmonitor"])
    check(m.split("\n").includes(h), `the agent's own commit/status ran its ${h} (so cae's steps silenced it)`, m);
  check(hostMarksNow() === "", "no planted program ever ran on this host", hostMarksNow());

  r = await call("environment_cleanup", { task_uuid: uuid });
  check(r.isError !== true, "environment_cleanup", r);
}

try {
  await main();
} catch (e) {
  check(false, "no exception", String(e?.stack ?? e));
} finally {
  await client.close().catch(() => {});
  try { execFileSync(gitServer, ["stop", srv]); } catch {}
  rmSync(tmp, { recursive: true, force: true });
}
if (tap.failed) process.stderr.write(Buffer.concat(stderrChunks).toString().slice(-4000));
finish();
