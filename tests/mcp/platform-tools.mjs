// The GitHub/GitLab MCP tool exclusion (with the text editor on, those servers are not offered) against the real servers: the reference
// GitHub and GitLab MCP servers from the npm registry (pinned in package.json) are started
// with the official SDK client, their tools/list is passed through `cae tools --filter`, and
// with the text editor on every tool that reads or writes the repository's files must be gone
// while the rest (issues, pull requests, search) stays; with the editor off, nothing goes.
// Also the names a client gives such tools when it qualifies them with the server's name.
//
// usage: node platform-tools.mjs /path/to/cae
// Needs tests/mcp/node_modules (scripts/npm-deps.sh). Exits 1 when any check fails.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

import { check, finish } from "./tap.mjs";

const cae = process.argv[2] ? resolve(process.argv[2]) : null;
if (!cae || !existsSync(cae)) {
  console.error("usage: node platform-tools.mjs /path/to/cae");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), "cae-platform-"));

// What each server's file tools are (read the servers' tools/list: these must be among them,
// so that the check below means something) and one tool of each that must stay.
const SERVERS = [
  { name: "github", pkg: "@modelcontextprotocol/server-github",
    file: ["create_or_update_file", "get_file_contents", "push_files"], other: "create_issue" },
  { name: "gitlab", pkg: "@modelcontextprotocol/server-gitlab",
    file: ["create_or_update_file", "get_file_contents", "push_files"], other: "create_merge_request" },
];
// a tool on a repository's files (not a pull request's list of changed files)
const isFileTool = (n) => /(^|_)(file|files|tree|blob|blame|contents)(_|$)/.test(n) && !/pull_request|merge_request/.test(n);

async function listTools(pkg) {
  const dir = join(here, "node_modules", pkg);
  const bin = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).bin;
  const entry = join(dir, typeof bin === "string" ? bin : Object.values(bin)[0]);
  const client = new Client({ name: "cae-platform-test", version: "1.0.0" });
  const transport = new StdioClientTransport({
    command: process.execPath, args: [entry], stderr: "ignore",
    // no network is used: tools/list needs none; a dummy token where the server wants one
    env: { PATH: process.env.PATH, GITHUB_PERSONAL_ACCESS_TOKEN: "ghp_unused", GITLAB_PERSONAL_ACCESS_TOKEN: "glpat-unused" },
  });
  await client.connect(transport);
  const { tools } = await client.listTools();
  await client.close();
  return tools;
}

function filter(tools, editorOn) {
  const file = join(tmp, "tools.json");
  writeFileSync(file, JSON.stringify({ tools }));
  const cfg = join(tmp, "config.yaml");
  writeFileSync(cfg, `text_editor_mcp:\n  enabled: ${editorOn}\n`);
  const out = execFileSync(cae, ["tools", "--filter", file, "--config", cfg], { encoding: "utf8" });
  return JSON.parse(out).tools.map((t) => t.name);
}

try {
  for (const s of SERVERS) {
    const tools = await listTools(s.pkg);
    const names = tools.map((t) => t.name);
    check(s.file.every((n) => names.includes(n)) && names.includes(s.other),
      `${s.name}: the server's tools/list has its file tools and ${s.other}`, names);
    const kept = filter(tools, true);
    const fileLike = names.filter(isFileTool);
    check(fileLike.every((n) => !kept.includes(n)),
      `${s.name}: no file tool is offered with the text editor on`, { fileLike, kept });
    check(kept.includes(s.other) && kept.length === names.length - fileLike.length,
      `${s.name}: every other tool stays`, { kept, names });
    // qualified by the server's name, as clients do: the whole server goes
    const qualified = tools.flatMap((t) => [`${s.name}_${t.name}`, `mcp__${s.name}__${t.name}`, `${s.name}-${t.name}`]
      .map((name) => ({ ...t, name })));
    check(filter(qualified, true).length === 0, `${s.name}: every qualified name goes`);
    const off = filter(tools, false);
    check(off.length === names.length, `${s.name}: with the text editor off nothing goes`, off);
  }
} catch (e) {
  check(false, "the servers answer tools/list", String(e?.stack ?? e));
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
finish();
