// Real upstream projects driven through `cae mcp` with the official MCP SDK client, as an
// agent works: prepare, the project's own tests, the text editor, a patch, a commit, a push to
// a loopback forge, a process session, cleanup. On the backend named by argv[3].
//
// The projects: Debian source packages, their upstream tarballs fetched at test time from
// Debian's mirror by scripts/corpus-fetch.sh (cached, never in this tree), each put in a git
// repository served by scripts/git-server.sh on 127.0.0.1 (smart HTTP, the token given to cae
// as a GitHub token). Each is small and its tests run in seconds with what is here:
//   - python-colorama (Python, unittest: 52 tests, no dependencies); prepared as a pull request
//     (a branch of the forge with one commit, diffed against its target);
//   - node-isarray (Node: `tape`, its one dev dependency, installed by prepare's `npm ci` from
//     the npm registry, as the project's package-lock.json says);
//   - golang-github-cespare-xxhash (Go module without dependencies, `go test`);
//   - bzip2 (C, make: builds and compresses/decompresses its samples, `make test`).
// local: all four (needs golang-go, scripts/install-deps.sh); docker: colorama and bzip2
// (the python image has Python, make and gcc) and xxhash (the go image, which
// scripts/docker-env.sh builds for it: ~40 s on the shared base; there is no node image,
// to spare the minutes of building one); kubernetes: colorama (the pod clones from the
// loopback server).
//
// Every check fails when the workflow breaks: tests that ran (a count or named results) and
// fail when the editor breaks the code (they test the workspace, not an installed copy); the
// patch's new test among the results; a commit without any identity set by the agent; the
// pushed branch on the server; the session's own exit code; the environment gone.
//
// usage: node corpus.mjs /path/to/cae local|docker|kubernetes
// Needs tests/mcp/node_modules (scripts/npm-deps.sh); docker the engine and the python image
// (scripts/docker-env.sh up); kubernetes CAE_TEST_K8S=1 and scripts/k8s-env.sh's cluster
// (else it exits 77, skipped). Exits 1 when any check fails.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

import { backendFromArgv, backendYaml, mcpClient } from "./backend.mjs";
import { check, finish, tap } from "./tap.mjs";

const { cae, backend } = backendFromArgv("corpus.mjs");

const PROJECTS = {
  "python-colorama": {
    // -B: no bytecode files, which an edit and its undo within one second (same size, same
    // mtime in seconds) would leave stale
    test: "python3 -B -m unittest discover -v -s colorama/tests -p '*_test.py' -t . 2>&1",
    passed: /\nRan ([1-9]\d*) tests? in [\s\S]*\nOK\b/,
    env: "python",
    view: { path: "colorama/ansi.py", range: [10, 14], has: "def code_to_chars(code):" },
    breakIt: { path: "colorama/ansi.py", old_str: "return CSI + str(code) + 'm'", new_str: "return CSI + str(code) + 'n'" },
    newFile: ["colorama/tests/corpus_test.py",
      "import unittest\n\nfrom colorama.ansi import code_to_chars\n\n\n" +
      "class CorpusTest(unittest.TestCase):\n    def test_corpus_code_to_chars(self):\n" +
      "        self.assertEqual(code_to_chars(31), '\\x1b[31m')\n"],
    patched: /test_corpus_code_to_chars \(colorama\.tests\.corpus_test\.CorpusTest/,
    pr: { branch: "pr/corpus-1", file: "CHANGELOG.rst", line: "pull request of the corpus test\n" },
  },
  "node-isarray": {
    test: "npm test 2>&1",
    passed: /\n# pass +[1-9]\d*\n[\s\S]*# ok\b/,
    env: "node",
    view: { path: "index.js", range: [1, 5], has: "module.exports = Array.isArray ||" },
    breakIt: { path: "index.js", old_str: "module.exports = Array.isArray ||", new_str: "module.exports = (function () { return false; }) ||" },
    newFile: ["test-corpus.js",
      "var isArray = require('./');\nvar test = require('tape');\n\n" +
      "test('corpus: an array is one', function (t) {\n  t.ok(isArray([1]));\n  t.end();\n});\n"],
    check: "node test-corpus.js 2>&1",
    patched: /# corpus: an array is one\nok 1 [\s\S]*\n# pass +1\n/,
  },
  "golang-github-cespare-xxhash": {
    test: "go test -count=1 ./... 2>&1",
    passed: /(^|\n)ok\s+github\.com\/cespare\/xxhash\/v2\s/,
    env: "go",
    view: { path: "xxhash.go", range: [10, 14], has: "prime1 uint64 = 11400714785074694791" },
    breakIt: { path: "xxhash.go", old_str: "prime1 uint64 = 11400714785074694791", new_str: "prime1 uint64 = 11400714785074694793" },
    newFile: ["corpus_test.go",
      "package xxhash\n\nimport \"testing\"\n\nfunc TestCorpus(t *testing.T) {\n" +
      "\tif got := Sum64String(\"\"); got != 0xef46db3751d8e999 {\n\t\tt.Fatalf(\"Sum64 of nothing: %x\", got)\n\t}\n}\n"],
    check: "go test -count=1 -v -run TestCorpus . 2>&1",
    patched: /--- PASS: TestCorpus/,
  },
  bzip2: {
    test: "make test 2>&1",
    passed: /cmp sample3\.tst sample3\.ref\n[\s\S]*in business/,
    env: "python", // the image with make and gcc on docker; on local the host's
    view: { path: "compress.c", range: [620, 628], has: "bsPutUChar ( s, BZ_HDR_B );" },
    breakIt: { path: "compress.c", old_str: "bsPutUChar ( s, BZ_HDR_B );", new_str: "bsPutUChar ( s, BZ_HDR_B + 1 );" },
    newFile: ["test-corpus.sh",
      "#!/bin/sh\n# a round trip of a file that is not one of the samples\nset -e\n" +
      "./bzip2 -9 -c < bzlib.c | ./bzip2 -d | cmp - bzlib.c\necho corpus-roundtrip-ok\n"],
    check: "make -s bzip2 && sh test-corpus.sh 2>&1",
    patched: /(^|\n)corpus-roundtrip-ok\n$/,
  },
};
const ON = { local: Object.keys(PROJECTS), docker: ["python-colorama", "bzip2", "golang-github-cespare-xxhash"], kubernetes: ["python-colorama"] };
// CAE_CORPUS_PROJECTS=a,b: only those (to look at one)
const names = ON[backend].filter((n) => !process.env.CAE_CORPUS_PROJECTS || process.env.CAE_CORPUS_PROJECTS.split(",").includes(n));

const tmp = mkdtempSync(join(tmpdir(), "cae-corpus-"));
const state = join(tmp, "state");
const srv = join(tmp, "srv");
execFileSync("mkdir", ["-p", state, srv]);
const scripts = resolve(new URL("../../scripts/", import.meta.url).pathname);
const gitServer = join(scripts, "git-server.sh");
const hostGit = (cwd, ...args) => execFileSync("git",
  ["-c", "user.name=corpus", "-c", "user.email=corpus@example.com", ...args], { cwd, stdio: "pipe", encoding: "utf8" });

// The sources (cached), each in a bare repository of the forge; the patches made here with
// git diff so that they apply to the real files.
const fetched = execFileSync(join(scripts, "corpus-fetch.sh"), names, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
for (const line of fetched.trim().split("\n")) {
  const [pkg, version, dir] = line.split(" ");
  const p = PROJECTS[pkg];
  p.version = version;
  const work = join(tmp, "work", pkg);
  execFileSync("mkdir", ["-p", join(tmp, "work")]);
  execFileSync("cp", ["-a", dir, work]);
  hostGit(work, "init", "-q", "-b", "main");
  hostGit(work, "add", "-A");
  hostGit(work, "commit", "-q", "-m", `${pkg} ${version} (upstream)`);
  if (p.pr) {
    hostGit(work, "checkout", "-q", "-b", p.pr.branch);
    execFileSync("sh", ["-c", `printf '%s' "$1" >> "$2"`, "sh", p.pr.line, p.pr.file], { cwd: work });
    hostGit(work, "commit", "-q", "-am", "the pull request's change");
    p.pr.head = hostGit(work, "rev-parse", "HEAD").trim();
    hostGit(work, "checkout", "-q", "main");
  }
  writeFileSync(join(work, p.newFile[0]), p.newFile[1]);
  hostGit(work, "add", "-N", p.newFile[0]);
  p.patch = hostGit(work, "diff");
  hostGit(work, "rm", "-q", "--cached", p.newFile[0]);
  unlinkSync(join(work, p.newFile[0]));
  hostGit(tmp, "clone", "-q", "--bare", work, join(srv, `${pkg}.git`));
}
const out = execFileSync(gitServer, ["start", srv], { encoding: "utf8" });
const httpUrl = /GIT_HTTP_URL=(\S+)/.exec(out)?.[1];
const token = /GIT_HTTP_TOKEN=(\S+)/.exec(out)?.[1];
if (!httpUrl || !token) throw new Error(`git-server.sh: ${out}`);
const serverRev = (pkg, ref) => {
  try {
    return execFileSync("git", ["--git-dir", join(srv, `${pkg}.git`), "rev-parse", "--verify", "-q", ref], { encoding: "utf8" }).trim();
  } catch { return ""; }
};

const config = join(tmp, "config.yaml");
let yaml = "command_executor:\n";
// npm ci reaches the npm registry, git push the loopback forge
if (backend === "local") yaml += "  local:\n    network: true\n";
yaml += backendYaml(backend);
yaml += `github:\n  token: ${JSON.stringify(token)}\n`;
writeFileSync(config, yaml);

const sc = (r) => r.structuredContent ?? {};
const stderrs = [];

// One project in its own MCP session (the projects run side by side).
async function project(pkg) {
  const p = PROJECTS[pkg];
  const { client, transport, stderrChunks } = mcpClient({ cae, backend, state, config, name: `cae-corpus-${pkg}` });
  stderrs.push(stderrChunks);
  const call = (name, args) => client.callTool({ name, arguments: args }, undefined,
    { timeout: 120000, resetTimeoutOnProgress: true, maxTotalTimeout: 900000 });
  const sh = (command) => call("command-executor_execute_command", { command });
  const L = `${backend} ${pkg} ${p.version}`;
  const uuid = `corpus-${pkg}-${backend}-${process.pid}`;
  let cleaned = false;
  try {
    await client.connect(transport);
    const task = { uuid, repo: `${httpUrl}${pkg}.git`, platform: "github" };
    if (p.pr) Object.assign(task, { kind: "pull_request", branch: p.pr.branch, target_branch: "main" });
    // every project in its own environment (its image on docker; colorama on kubernetes is python)
    let r = await call("environment_prepare", { task, environment: p.env });
    if (!check(r.isError !== true && sc(r).status === "ready", `${L}: environment_prepare`, r)) return;
    if (p.pr) {
      r = await sh("git rev-parse HEAD; git diff --name-only origin/main...HEAD");
      check(sc(r).exit_code === 0 && sc(r).stdout === `${p.pr.head}\n${p.pr.file}\n`,
        `${L}: the pull request's branch is checked out and diffs against its target`, sc(r));
    }
    if (pkg === "node-isarray") {
      r = await sh("test -f node_modules/tape/package.json && node -p 'require(\"tape/package.json\").version'");
      check(sc(r).exit_code === 0 && /^2\.13\./.test(sc(r).stdout ?? ""), `${L}: prepare installed the lock file's tape (npm ci)`, sc(r));
    }

    r = await sh(p.test);
    check(sc(r).exit_code === 0 && p.passed.test(sc(r).stdout ?? ""), `${L}: the project's own tests pass`,
      { exit_code: sc(r).exit_code, out: (sc(r).stdout ?? "").slice(-1500) });

    r = await call("text_editor", { command: "view", path: p.view.path, view_range: p.view.range });
    check(r.isError !== true && JSON.stringify(r.content).includes(JSON.stringify(p.view.has).slice(1, -1)),
      `${L}: text_editor view ${p.view.path}`, r);
    r = await call("text_editor", { command: "str_replace", ...p.breakIt });
    check(r.isError !== true, `${L}: text_editor str_replace in ${p.breakIt.path}`, r);
    r = await sh(p.test);
    check(sc(r).exit_code !== 0 && sc(r).exit_code !== undefined, `${L}: the tests fail with the code the editor broke`,
      { exit_code: sc(r).exit_code, out: (sc(r).stdout ?? "").slice(-800) });
    r = await call("text_editor", { command: "undo_edit", path: p.breakIt.path });
    check(r.isError !== true, `${L}: text_editor undo_edit`, r);

    r = await call("apply_patch", { patch: p.patch });
    check(r.isError !== true && sc(r).success === true, `${L}: apply_patch (a unified diff adding ${p.newFile[0]})`, r);
    r = await sh(p.check ?? p.test);
    check(sc(r).exit_code === 0 && p.patched.test(sc(r).stdout ?? ""), `${L}: the patch's test runs and passes`,
      { exit_code: sc(r).exit_code, out: (sc(r).stdout ?? "").slice(-1500) });

    // The agent sets no identity: the sandbox's own makes the commit.
    r = await sh(`git add ${p.newFile[0]} && git commit -q -m 'add the corpus test' && git log -1 --format='%H%n%an <%ae>%n%s'`);
    const [commit, author, subject] = (sc(r).stdout ?? "").split("\n");
    check(sc(r).exit_code === 0 && /^[0-9a-f]{40}$/.test(commit) && /^\S.* <\S+@\S+>$/.test(author) && subject === "add the corpus test",
      `${L}: git commit without an identity set by the agent`, sc(r));
    const branch = `corpus/${backend}-${process.pid}`;
    r = await sh(`git push -q origin HEAD:refs/heads/${branch} 2>&1`);
    check(sc(r).exit_code === 0, `${L}: git push to the loopback forge`, sc(r));
    check(commit && serverRev(pkg, `refs/heads/${branch}`) === commit, `${L}: the pushed branch arrived`,
      { server: serverRev(pkg, `refs/heads/${branch}`), commit });

    r = await call("process_start", { command: p.test, wait_ms: 0 });
    check(r.isError !== true && /^p\d+$/.test(sc(r).session_id ?? ""), `${L}: process_start: the tests in a session`, r);
    r = await call("process_wait", { session_id: sc(r).session_id, timeout_ms: 300000, max_chars: 200000 });
    check(sc(r).state === "exited" && sc(r).exit_code === 0 && p.passed.test(sc(r).output ?? ""),
      `${L}: process_wait: the session's tests passed`, { ...sc(r), output: (sc(r).output ?? "").slice(-800) });

    r = await call("environment_cleanup", { task_uuid: uuid });
    cleaned = check(r.isError !== true, `${L}: environment_cleanup`, r);
    r = await call("environment_list", {});
    check(!(sc(r).environments ?? []).some((e) => JSON.stringify(e).includes(uuid)), `${L}: the environment is gone`, sc(r));
  } catch (e) {
    check(false, `${L}: no exception`, String(e?.stack ?? e));
  } finally {
    await client.close().catch(() => {});
    // after a failure half-way: nothing of this run is left behind
    if (!cleaned) {
      try {
        execFileSync(cae, ["cleanup", "--uuid", uuid, "--backend", backend, "--state-dir", state],
          { env: { ...process.env, CAE_CONFIG: config, CAE_LOG_LEVEL: "error" }, stdio: "pipe" });
      } catch {}
    }
  }
}

try {
  await Promise.all(names.map(project));
} finally {
  try { execFileSync(gitServer, ["stop", srv]); } catch {}
  rmSync(tmp, { recursive: true, force: true });
}
if (tap.failed) for (const c of stderrs) process.stderr.write(Buffer.concat(c).toString().slice(-3000));
finish();
