// What the SDK-client tests that run on every backend share: the command line (the cae binary
// and the backend), the gate of the kubernetes run, the configuration lines a backend needs
// here (containers and pods on the host network, the test cluster's namespace and node), and
// the official SDK client connected to `cae mcp`. Used by sdk-sessions.mjs and sdk-hooks.mjs.
import { existsSync } from "node:fs";
import { resolve } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

// argv: /path/to/cae local|docker|kubernetes. Exits 2 on a bad command line, 77 (skipped) for
// kubernetes without CAE_TEST_K8S=1.
export function backendFromArgv(script) {
  const cae = process.argv[2] ? resolve(process.argv[2]) : null;
  const backend = process.argv[3] ?? "local";
  if (!cae || !existsSync(cae) || !["local", "docker", "kubernetes"].includes(backend)) {
    console.error(`usage: node ${script} /path/to/cae local|docker|kubernetes`);
    process.exit(2);
  }
  if (backend === "kubernetes" && process.env.CAE_TEST_K8S !== "1") {
    console.log("# kubernetes: CAE_TEST_K8S=1 not set (make check sets it after scripts/k8s-env.sh up)");
    process.exit(77);
  }
  return { cae, backend };
}

// The lines under command_executor: a backend needs on this machine ("" for local).
export function backendYaml(backend) {
  let yaml = "";
  if (backend !== "local")
    yaml += "  docker:\n    network:\n      mode: host\n    resources:\n      pids_limit: 256\n      memory_limit: 1g\n      cpu_limit: 1\n";
  if (backend === "kubernetes")
    yaml += "  kubernetes:\n    namespace: default\n    node_name: localhost\n    image_pull_policy: Never\n";
  return yaml;
}

// The SDK client of `cae mcp --backend backend --state-dir state` with config (connect it);
// its stderr gathers in stderrChunks. logLevel: CAE_LOG_LEVEL (default: the caller's, or warn).
export function mcpClient({ cae, backend, state, config, name, logLevel }) {
  const stderrChunks = [];
  const transport = new StdioClientTransport({
    command: cae,
    args: ["mcp", "--backend", backend, "--state-dir", state],
    env: { ...process.env, CAE_CONFIG: config, CAE_LOG_LEVEL: logLevel ?? process.env.CAE_LOG_LEVEL ?? "warn" },
    stderr: "pipe",
  });
  transport.stderr?.on("data", (d) => stderrChunks.push(d));
  return { client: new Client({ name, version: "1.0.0" }), transport, stderrChunks };
}
