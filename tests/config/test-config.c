#include "cae/config.h"
#include "base/macro.h"
#include "cae/net.h"
#include "testutil.h"

#include <errno.h>
#include <stdint.h>

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_config *, cae_config_free)
#define _cleanup_config_ _cleanup_(cae_config_freep)
#define _cleanup_json_ _cleanup_(json_decrefp)

/* An environment for the loader: a NULL-terminated array of "NAME=value". */
#define ENVP(...) ((char *const[]){__VA_ARGS__, NULL})
static char *const no_env[] = {NULL};

static cae_config *load_ok(const char *yaml, char *const *envp)
{
	cae_config *cfg = NULL;
	cae_error err = {0};
	int r = cae_config_load_string(&cfg, yaml, strlen(yaml), "config.yaml", envp, &err);
	ck_assert_msg(r == 0, "load failed: %d %s", r, err.message);
	ck_assert_ptr_nonnull(cfg);
	return cfg;
}

/* Loads and expects an error; returns its message (static). */
static const char *load_err(const char *yaml, char *const *envp, int expect)
{
	static cae_error err;
	cae_config *cfg = (cae_config *)1;
	cae_error_clear(&err);
	int r = cae_config_load_string(&cfg, yaml, strlen(yaml), "config.yaml", envp, &err);
	ck_assert_msg(r == expect, "expected %d, got %d (%s)", expect, r, err.message);
	ck_assert_ptr_null(cfg);
	ck_assert_int_eq(err.code, expect);
	return err.message;
}

#define ck_assert_contains(hay, needle)                                                            \
	ck_assert_msg(strstr((hay), (needle)) != NULL, "\"%s\" does not contain \"%s\"", (hay),    \
		      (needle))

START_TEST(defaults)
{
	_cleanup_config_ cae_config *cfg = cae_config_defaults(ENVP((char *)"HOME=/home/u"));
	ck_assert_ptr_nonnull(cfg);
	ck_assert(cfg->command_executor.enabled);
	ck_assert_int_eq(cfg->command_executor.backend, CAE_CONFIG_BACKEND_AUTO);
	ck_assert_str_eq(cfg->command_executor.docker_host, "unix:///var/run/docker.sock");
	ck_assert_uint_eq(cfg->command_executor.n_environments, 5);
	const char *names[] = {"python", "miniforge", "node", "java", "go"};
	for (size_t i = 0; i < 5; i++) {
		char img[128];
		snprintf(img, sizeof(img), "coding-agent-executor-%s:latest", names[i]);
		ck_assert_str_eq(cfg->command_executor.environments[i].name, names[i]);
		ck_assert_str_eq(cfg->command_executor.environments[i].image, img);
	}
	ck_assert_str_eq(cae_config_environment_image(cfg, "node"),
			 "coding-agent-executor-node:latest");
	ck_assert_ptr_null(cae_config_environment_image(cfg, "rust"));
	ck_assert_str_eq(cfg->command_executor.default_environment, "python");
	ck_assert_str_eq(cfg->command_executor.state_dir, "/home/u/.local/state/cae");
	ck_assert_str_eq(cfg->command_executor.docker.base_image,
			 "coding-agent-executor-python:latest");
	ck_assert(cfg->command_executor.docker.resources.cpu_limit == 2.0);
	ck_assert_str_eq(cfg->command_executor.docker.resources.memory_limit, "4g");
	ck_assert_uint_eq(cfg->command_executor.docker.resources.memory_bytes, 4ull << 30);
	ck_assert_str_eq(cfg->command_executor.docker.resources.disk_limit, "10g");
	ck_assert_uint_eq(cfg->command_executor.docker.resources.disk_bytes, 10ull << 30);
	ck_assert_int_eq(cfg->command_executor.docker.resources.pids_limit, 1024);
	ck_assert_int_eq(cfg->command_executor.docker.network.mode, CAE_CONFIG_NETWORK_BRIDGE);
	ck_assert(cfg->command_executor.docker.network.external_access);
	ck_assert(!cfg->command_executor.docker.network.whitelist_mode);
	ck_assert_uint_eq(cfg->command_executor.docker.network.allowed_domains.n, 0);
	ck_assert(!cfg->command_executor.docker.mount_docker_socket);
	ck_assert(cfg->command_executor.clone.shallow);
	ck_assert_int_eq(cfg->command_executor.clone.depth, 1);
	ck_assert(cfg->command_executor.clone.auto_install_deps);
	ck_assert_int_eq(cfg->command_executor.clone.timeout_seconds, 300);
	ck_assert_int_eq(cfg->command_executor.execution.timeout_seconds, 1800);
	ck_assert_uint_eq(cfg->command_executor.execution.max_output_size, 1048576);
	ck_assert_int_eq(cfg->command_executor.execution.truncate, CAE_CONFIG_TRUNCATE_HEAD);
	ck_assert_int_eq(cfg->command_executor.cleanup.interval_hours, 24);
	ck_assert_int_eq(cfg->command_executor.cleanup.stale_threshold_hours, 24);
	ck_assert(cfg->command_executor.allowed_commands.use_default);
	ck_assert(!cfg->command_executor.allowed_commands.enforce);
	ck_assert_uint_eq(cfg->command_executor.allowed_commands.additional.n, 0);
	ck_assert_int_eq(cfg->command_executor.local.sandbox, CAE_CONFIG_SANDBOX_AUTO);
	ck_assert(!cfg->command_executor.local.network);
	ck_assert(!cfg->command_executor.local.unconfined);
	ck_assert_int_eq(cfg->command_executor.local.sandbox_uid, 100000);
	ck_assert(cfg->text_editor_mcp.enabled);
	ck_assert_int_eq(cfg->text_editor_mcp.mode, CAE_CONFIG_EDITOR_NATIVE);
	ck_assert_uint_eq(cfg->text_editor_mcp.mcp_server.command.n, 3);
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.command.items[2],
			 "mcp-server-text-editor");
	ck_assert_uint_eq(cfg->text_editor_mcp.max_file_size, 10ull << 20);
	ck_assert_int_eq(cfg->text_editor_mcp.undo_depth, 10);
	ck_assert_uint_eq(cfg->text_editor_mcp.undo_max_bytes, 64ull << 20);
	ck_assert_int_eq(cfg->text_editor_mcp.view_max_chars, 16000);
	ck_assert(cfg->worker.enabled);
	ck_assert(!cfg->worker.auto_commit);
	ck_assert_str_eq(cfg->worker.commit_message_prefix, "[Worker Auto-Commit]");
	ck_assert_int_eq(cfg->worker.command_timeout, 300);
	ck_assert_int_eq(cfg->worker.git_timeout, 30);
	ck_assert(!cfg->worker.stop_on_error);
	ck_assert(!cfg->worker.dry_run);
	ck_assert(!cfg->worker.rollback);
	ck_assert_ptr_null(cfg->github.token);
	ck_assert_ptr_null(cfg->gitlab.token);
	ck_assert_str_eq(cfg->gitlab.api_url, "https://gitlab.com/api/v4");
	ck_assert(cfg->gitlab.ssl_verify);
	ck_assert_ptr_null(cfg->source);
	ck_assert_uint_eq(cfg->warnings.n, 0);
}
END_TEST

START_TEST(default_state_dir_rules)
{
	cae_config *a =
	    cae_config_defaults(ENVP((char *)"HOME=/h", (char *)"XDG_STATE_HOME=/xdg/state"));
	ck_assert_str_eq(a->command_executor.state_dir, "/xdg/state/cae");
	cae_config_free(a);
	a = cae_config_defaults(ENVP((char *)"XDG_STATE_HOME=relative", (char *)"HOME=/h"));
	ck_assert_str_eq(a->command_executor.state_dir, "/h/.local/state/cae");
	cae_config_free(a);
	a = cae_config_defaults(no_env);
	ck_assert_str_eq(a->command_executor.state_dir, "/var/lib/cae");
	cae_config_free(a);
	/* an empty file or a null document is the defaults */
	_cleanup_config_ cae_config *b = load_ok("", no_env);
	ck_assert_str_eq(b->source, "config.yaml");
	_cleanup_config_ cae_config *c = load_ok("# only a comment\n---\n", no_env);
	ck_assert_int_eq(c->command_executor.execution.timeout_seconds, 1800);
}
END_TEST

static const char full_yaml[] = "command_executor:\n"
				"  enabled: no\n"
				"  backend: local\n"
				"  docker_host: tcp://10.0.0.1:2375\n"
				"  environments:\n"
				"    python: my-python:1\n"
				"    rust: my-rust:2\n"
				"  default_environment: rust\n"
				"  state_dir: ~/state\n"
				"  mcp_server:\n"
				"    name: ce\n"
				"    command: [node, server.js]\n"
				"  docker:\n"
				"    base_image: base:3\n"
				"    resources:\n"
				"      cpu_limit: 1.5\n"
				"      memory_limit: 512m\n"
				"      disk_limit: 0\n"
				"      pids_limit: 256\n"
				"    network:\n"
				"      mode: bridge\n"
				"      external_access: true\n"
				"      whitelist_mode: true\n"
				"      allowed_domains:\n"
				"        - pypi.org\n"
				"        - \"registry.npmjs.org\"\n"
				"    mount_docker_socket: true\n"
				"  clone:\n"
				"    shallow: false\n"
				"    depth: 50\n"
				"    auto_install_deps: off\n"
				"    timeout_seconds: 120\n"
				"  execution:\n"
				"    timeout_seconds: 60\n"
				"    max_output_size: 64k\n"
				"    truncate: head_tail\n"
				"  cleanup:\n"
				"    interval_hours: 6\n"
				"    stale_threshold_hours: 12\n"
				"  allowed_commands:\n"
				"    use_default: false\n"
				"    additional: [custom-build-tool]\n"
				"    exclude: [curl, wget]\n"
				"    custom_list: [npm, python, grep]\n"
				"    enforce: true\n"
				"  local:\n"
				"    sandbox: bubblewrap\n"
				"    network: yes\n"
				"text_editor_mcp:\n"
				"  enabled: false\n"
				"  mode: mcp\n"
				"  mcp_server:\n"
				"    name: te\n"
				"    command: [npx, -y, mcp-server-text-editor@1]\n"
				"  max_file_size: 2MiB\n"
				"  undo_depth: 0\n"
				"  undo_max_bytes: 1g\n"
				"  view_max_chars: 5000\n"
				"worker:\n"
				"  enabled: false\n"
				"  auto_commit: true\n"
				"  commit_message_prefix: \"[bot]\"\n"
				"  command_timeout: 100\n"
				"  git_timeout: 10\n"
				"  stop_on_error: true\n"
				"  dry_run: true\n"
				"  rollback: true\n"
				"github:\n"
				"  token: ghp_filetoken1234\n"
				"gitlab:\n"
				"  token: glpat-filetoken\n"
				"  api_url: https://gitlab.example.com/api/v4\n"
				"  ssl_verify: false\n";

static void check_full(const cae_config *cfg)
{
	ck_assert(!cfg->command_executor.enabled);
	ck_assert_int_eq(cfg->command_executor.backend, CAE_CONFIG_BACKEND_LOCAL);
	ck_assert_str_eq(cfg->command_executor.docker_host, "tcp://10.0.0.1:2375");
	ck_assert_uint_eq(cfg->command_executor.n_environments, 2);
	ck_assert_str_eq(cae_config_environment_image(cfg, "rust"), "my-rust:2");
	ck_assert_str_eq(cae_config_environment_image(cfg, "python"), "my-python:1");
	ck_assert_ptr_null(cae_config_environment_image(cfg, "node"));
	ck_assert_str_eq(cfg->command_executor.default_environment, "rust");
	ck_assert_str_eq(cfg->command_executor.state_dir, "/home/t/state");
	ck_assert_str_eq(cfg->command_executor.mcp_server.name, "ce");
	ck_assert_uint_eq(cfg->command_executor.mcp_server.command.n, 2);
	ck_assert_str_eq(cfg->command_executor.docker.base_image, "base:3");
	ck_assert(cfg->command_executor.docker.resources.cpu_limit == 1.5);
	ck_assert_str_eq(cfg->command_executor.docker.resources.memory_limit, "512m");
	ck_assert_uint_eq(cfg->command_executor.docker.resources.memory_bytes, 512ull << 20);
	ck_assert_uint_eq(cfg->command_executor.docker.resources.disk_bytes, 0);
	ck_assert_int_eq(cfg->command_executor.docker.resources.pids_limit, 256);
	ck_assert_int_eq(cfg->command_executor.docker.network.mode, CAE_CONFIG_NETWORK_BRIDGE);
	ck_assert(cfg->command_executor.docker.network.whitelist_mode);
	ck_assert_uint_eq(cfg->command_executor.docker.network.allowed_domains.n, 2);
	ck_assert_str_eq(cfg->command_executor.docker.network.allowed_domains.items[1],
			 "registry.npmjs.org");
	ck_assert(cfg->command_executor.docker.mount_docker_socket);
	ck_assert(!cfg->command_executor.clone.shallow);
	ck_assert_int_eq(cfg->command_executor.clone.depth, 50);
	ck_assert(!cfg->command_executor.clone.auto_install_deps);
	ck_assert_int_eq(cfg->command_executor.clone.timeout_seconds, 120);
	ck_assert_int_eq(cfg->command_executor.execution.timeout_seconds, 60);
	ck_assert_uint_eq(cfg->command_executor.execution.max_output_size, 65536);
	ck_assert_int_eq(cfg->command_executor.execution.truncate, CAE_CONFIG_TRUNCATE_HEAD_TAIL);
	ck_assert_int_eq(cfg->command_executor.cleanup.interval_hours, 6);
	ck_assert_int_eq(cfg->command_executor.cleanup.stale_threshold_hours, 12);
	ck_assert(!cfg->command_executor.allowed_commands.use_default);
	ck_assert_str_eq(cfg->command_executor.allowed_commands.additional.items[0],
			 "custom-build-tool");
	ck_assert_uint_eq(cfg->command_executor.allowed_commands.exclude.n, 2);
	ck_assert_uint_eq(cfg->command_executor.allowed_commands.custom_list.n, 3);
	ck_assert(cfg->command_executor.allowed_commands.enforce);
	ck_assert_int_eq(cfg->command_executor.local.sandbox, CAE_CONFIG_SANDBOX_BUBBLEWRAP);
	ck_assert(cfg->command_executor.local.network);
	ck_assert(!cfg->text_editor_mcp.enabled);
	ck_assert_int_eq(cfg->text_editor_mcp.mode, CAE_CONFIG_EDITOR_MCP);
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.name, "te");
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.command.items[2],
			 "mcp-server-text-editor@1");
	ck_assert_uint_eq(cfg->text_editor_mcp.max_file_size, 2ull << 20);
	ck_assert_int_eq(cfg->text_editor_mcp.undo_depth, 0);
	ck_assert_uint_eq(cfg->text_editor_mcp.undo_max_bytes, 1ull << 30);
	ck_assert_int_eq(cfg->text_editor_mcp.view_max_chars, 5000);
	ck_assert(!cfg->worker.enabled);
	ck_assert(cfg->worker.auto_commit);
	ck_assert_str_eq(cfg->worker.commit_message_prefix, "[bot]");
	ck_assert_int_eq(cfg->worker.command_timeout, 100);
	ck_assert_int_eq(cfg->worker.git_timeout, 10);
	ck_assert(cfg->worker.stop_on_error);
	ck_assert(cfg->worker.dry_run);
	ck_assert(cfg->worker.rollback);
	ck_assert_str_eq(cfg->github.token, "ghp_filetoken1234");
	ck_assert_str_eq(cfg->gitlab.token, "glpat-filetoken");
	ck_assert_str_eq(cfg->gitlab.api_url, "https://gitlab.example.com/api/v4");
	ck_assert(!cfg->gitlab.ssl_verify);
}

/* The instance: label-safe when configured (YAML and CAE_INSTANCE), else derived from the
 * state directory's real path (the same for two spellings of it, another for another). */
START_TEST(instance_rules)
{
	char a[CAE_CONFIG_INSTANCE_MAX], b[CAE_CONFIG_INSTANCE_MAX];
	_cleanup_config_ cae_config *d = load_ok("command_executor:\n  state_dir: /tmp\n", no_env);
	ck_assert_ptr_null(d->command_executor.instance);
	cae_config_instance(d, a);
	ck_assert(cae_config_label_valid(a));
	ck_assert_uint_eq(strlen(a), 13);
	_cleanup_config_ cae_config *d2 =
	    load_ok("command_executor:\n  state_dir: /tmp/./\n", no_env);
	ck_assert_str_eq(cae_config_instance(d2, b), a);
	_cleanup_config_ cae_config *d3 = load_ok("command_executor:\n  state_dir: /var\n", no_env);
	ck_assert_str_ne(cae_config_instance(d3, b), a);
	_cleanup_config_ cae_config *c =
	    load_ok("command_executor:\n  instance: team-a.1\n", ENVP((char *)"HOME=/h"));
	ck_assert_str_eq(cae_config_instance(c, a), "team-a.1");
	_cleanup_config_ cae_config *e = load_ok("", ENVP((char *)"CAE_INSTANCE=ci_7"));
	ck_assert_str_eq(cae_config_instance(e, a), "ci_7");
	const char *bad[] = {"-x",
			     "x-",
			     "a b",
			     "a/b",
			     "\"\"",
			     "\"a:b\"",
			     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char yaml[256];
		snprintf(yaml, sizeof(yaml), "command_executor:\n  instance: %s\n", bad[i]);
		const char *m = load_err(yaml, no_env, -EINVAL);
		ck_assert_contains(m, "command_executor.instance");
	}
	ck_assert_int_eq(cae_config_set(c, "command_executor.instance", "x y", NULL), -EINVAL);
	ck_assert_str_eq(cae_config_instance(c, a), "team-a.1");
}
END_TEST

START_TEST(local_repo_roots)
{
	/* empty by default */
	_cleanup_config_ cae_config *d = load_ok("", no_env);
	ck_assert_uint_eq(d->command_executor.local_repo_roots.n, 0);
	/* a YAML list, "~/" expanded */
	_cleanup_config_ cae_config *cfg =
	    load_ok("command_executor:\n  local_repo_roots:\n    - /srv/repos\n    - ~/src\n",
		    ENVP((char *)"HOME=/home/t"));
	ck_assert_uint_eq(cfg->command_executor.local_repo_roots.n, 2);
	ck_assert_str_eq(cfg->command_executor.local_repo_roots.items[0], "/srv/repos");
	ck_assert_str_eq(cfg->command_executor.local_repo_roots.items[1], "/home/t/src");
	/* shown by `cae config show` (the JSON form) */
	json_t *j = cae_config_to_json(cfg, true);
	json_t *roots = json_object_get(json_object_get(j, "command_executor"), "local_repo_roots");
	ck_assert_uint_eq(json_array_size(roots), 2);
	ck_assert_str_eq(json_string_value(json_array_get(roots, 1)), "/home/t/src");
	json_decref(j);
	/* the text form (cae_config_set) */
	ck_assert_int_eq(cae_config_set(cfg, "command_executor.local_repo_roots", "/a, /b/c", NULL),
			 0);
	ck_assert_uint_eq(cfg->command_executor.local_repo_roots.n, 2);
	ck_assert_str_eq(cfg->command_executor.local_repo_roots.items[1], "/b/c");
	cae_error err = {0};
	ck_assert_int_eq(cae_config_set(cfg, "command_executor.local_repo_roots", "/a,rel", &err),
			 -EINVAL);
	ck_assert_contains(err.message, "expected absolute paths");
	ck_assert_str_eq(cfg->command_executor.local_repo_roots.items[1], "/b/c");
	/* relative paths refused with file and line */
	const char *m = load_err("command_executor:\n  local_repo_roots:\n    - /ok\n    - repos\n",
				 no_env, -EINVAL);
	ck_assert_str_eq(m, "config.yaml:4: command_executor.local_repo_roots: expected absolute "
			    "paths, got \"repos\"");
}
END_TEST

START_TEST(every_key)
{
	_cleanup_config_ cae_config *cfg = load_ok(full_yaml, ENVP((char *)"HOME=/home/t"));
	check_full(cfg);
	/* the only warning: the Docker socket mount */
	ck_assert_uint_eq(cfg->warnings.n, 1);
	ck_assert_contains(cfg->warnings.items[0], "mount_docker_socket");
}
END_TEST

START_TEST(json_round_trip)
{
	char *const *env = ENVP((char *)"HOME=/home/t");
	_cleanup_config_ cae_config *cfg = load_ok(full_yaml, env);
	_cleanup_json_ json_t *j = cae_config_to_json(cfg, false);
	ck_assert_ptr_nonnull(j);
	_cleanup_free_ char *text = json_dumps(j, JSON_INDENT(2));
	/* the JSON is itself a config file (JSON is YAML) giving the same config */
	_cleanup_config_ cae_config *again = load_ok(text, env);
	check_full(again);
	_cleanup_json_ json_t *j2 = cae_config_to_json(again, false);
	ck_assert(json_equal(j, j2));
	ck_assert_uint_eq(again->warnings.n, 1); /* no unknown keys, only the socket warning */
	/* and the defaults round-trip too */
	_cleanup_config_ cae_config *d = cae_config_defaults(env);
	_cleanup_json_ json_t *dj = cae_config_to_json(d, false);
	_cleanup_free_ char *dtext = json_dumps(dj, 0);
	_cleanup_config_ cae_config *d2 = load_ok(dtext, env);
	_cleanup_json_ json_t *dj2 = cae_config_to_json(d2, false);
	ck_assert(json_equal(dj, dj2));
	ck_assert_uint_eq(d2->warnings.n, 0);
	ck_assert_str_eq(
	    json_string_value(json_object_get(
		json_object_get(json_object_get(dj, "command_executor"), "execution"), "truncate")),
	    "head");
}
END_TEST

START_TEST(aliases_and_anchors)
{
	_cleanup_config_ cae_config *cfg = load_ok("defaults: &t 77\n"
						   "worker:\n"
						   "  commit_prefix: \"[p]\"\n"
						   "  shell_timeout: *t\n"
						   "text_editor_mcp:\n"
						   "  command: &cmd [a, b]\n"
						   "command_executor:\n"
						   "  mcp_server: {command: *cmd}\n",
						   no_env);
	ck_assert_str_eq(cfg->worker.commit_message_prefix, "[p]");
	ck_assert_int_eq(cfg->worker.command_timeout, 77);
	ck_assert_uint_eq(cfg->text_editor_mcp.mcp_server.command.n, 2);
	ck_assert_str_eq(cfg->command_executor.mcp_server.command.items[1], "b");
	ck_assert_uint_eq(cfg->warnings.n, 1); /* "defaults" is unknown */
	ck_assert_contains(cfg->warnings.items[0], "config.yaml:1: unknown key \"defaults\"");

	const char *m =
	    load_err("worker:\n  commit_prefix: a\n  commit_message_prefix: b\n", no_env, -EINVAL);
	ck_assert_contains(m, "config.yaml:3: worker.commit_message_prefix: given twice");
	m = load_err("worker:\n  git_timeout: 1\n  git_timeout: 2\n", no_env, -EINVAL);
	ck_assert_contains(m, "config.yaml:3: worker.git_timeout: given twice");
	m = load_err("x: *nope\n", no_env, -EINVAL);
	ck_assert_contains(m, "config.yaml:1:");
	ck_assert_contains(m, "nope");
}
END_TEST

START_TEST(env_overrides)
{
	const char *yaml =
	    "command_executor:\n"
	    "  enabled: false\n"
	    "  execution: {timeout_seconds: 100}\n"
	    "  docker: {base_image: file-image, resources: {cpu_limit: 1, memory_limit: 1g}}\n"
	    "worker: {auto_commit: false, commit_message_prefix: file}\n";
	char *const *env = ENVP(
	    (char *)"COMMAND_EXECUTOR_ENABLED=YES", (char *)"DOCKER_HOST=tcp://h:1",
	    (char *)"EXECUTOR_BASE_IMAGE=env-image", (char *)"EXECUTOR_CPU_LIMIT=0.5",
	    (char *)"EXECUTOR_MEMORY_LIMIT=2g", (char *)"EXECUTOR_TIMEOUT=200",
	    (char *)"EXECUTOR_BACKEND=docker", (char *)"CAE_STATE_DIR=/srv/cae",
	    (char *)"TEXT_EDITOR_MCP_ENABLED=0", (char *)"PICOCLAW_WORKER_AUTO_COMMIT=true",
	    (char *)"PICOCLAW_WORKER_COMMIT_PREFIX=[env]",
	    (char *)"PICOCLAW_WORKER_COMMAND_TIMEOUT=42", (char *)"PICOCLAW_WORKER_GIT_TIMEOUT=7",
	    (char *)"PICOCLAW_WORKER_STOP_ON_ERROR=1", (char *)"PICOCLAW_WORKER_DRY_RUN=on",
	    (char *)"PICOCLAW_WORKER_ROLLBACK=yes", (char *)"PICOCLAW_WORKER_ENABLED=no",
	    (char *)"GITHUB_PERSONAL_ACCESS_TOKEN=ghp_envtoken",
	    (char *)"GITLAB_PERSONAL_ACCESS_TOKEN=glpat-env",
	    (char *)"GITLAB_API_URL=https://gl.local/api/v4", (char *)"EXECUTOR_TIMEOUTX=5");
	_cleanup_config_ cae_config *cfg = load_ok(yaml, env);
	ck_assert(cfg->command_executor.enabled);
	ck_assert_str_eq(cfg->command_executor.docker_host, "tcp://h:1");
	ck_assert_str_eq(cfg->command_executor.docker.base_image, "env-image");
	ck_assert(cfg->command_executor.docker.resources.cpu_limit == 0.5);
	ck_assert_uint_eq(cfg->command_executor.docker.resources.memory_bytes, 2ull << 30);
	ck_assert_str_eq(cfg->command_executor.docker.resources.memory_limit, "2g");
	ck_assert_int_eq(cfg->command_executor.execution.timeout_seconds, 200);
	ck_assert_int_eq(cfg->command_executor.backend, CAE_CONFIG_BACKEND_DOCKER);
	ck_assert_str_eq(cfg->command_executor.state_dir, "/srv/cae");
	ck_assert(!cfg->text_editor_mcp.enabled);
	ck_assert(cfg->worker.auto_commit);
	ck_assert_str_eq(cfg->worker.commit_message_prefix, "[env]");
	ck_assert_int_eq(cfg->worker.command_timeout, 42);
	ck_assert_int_eq(cfg->worker.git_timeout, 7);
	ck_assert(cfg->worker.stop_on_error);
	ck_assert(cfg->worker.dry_run);
	ck_assert(cfg->worker.rollback);
	ck_assert(!cfg->worker.enabled);
	ck_assert_str_eq(cfg->github.token, "ghp_envtoken");
	ck_assert_str_eq(cfg->gitlab.token, "glpat-env");
	ck_assert_str_eq(cfg->gitlab.api_url, "https://gl.local/api/v4");

	/* a set but empty variable is unset */
	_cleanup_config_ cae_config *e = load_ok(yaml, ENVP((char *)"EXECUTOR_TIMEOUT="));
	ck_assert_int_eq(e->command_executor.execution.timeout_seconds, 100);
}
END_TEST

START_TEST(env_errors_name_the_variable)
{
	const char *m = load_err("", ENVP((char *)"EXECUTOR_TIMEOUT=abc"), -EINVAL);
	ck_assert_str_eq(
	    m, "environment variable EXECUTOR_TIMEOUT "
	       "(command_executor.execution.timeout_seconds): expected a positive integer, "
	       "got \"abc\"");
	m = load_err("", ENVP((char *)"COMMAND_EXECUTOR_ENABLED=maybe"), -EINVAL);
	ck_assert_contains(m, "environment variable COMMAND_EXECUTOR_ENABLED");
	ck_assert_contains(m, "expected a boolean");
	m = load_err("", ENVP((char *)"EXECUTOR_BACKEND=podman"), -EINVAL);
	ck_assert_contains(m, "EXECUTOR_BACKEND");
	ck_assert_contains(m, "expected one of auto, docker, local, kubernetes, got \"podman\"");
	m = load_err("", ENVP((char *)"EXECUTOR_MEMORY_LIMIT=lots"), -EINVAL);
	ck_assert_contains(m, "EXECUTOR_MEMORY_LIMIT");
	m = load_err("", ENVP((char *)"EXECUTOR_MEMORY_LIMIT=1k"), -EINVAL);
	ck_assert_contains(m, "expected a size from");
	m = load_err("", ENVP((char *)"EXECUTOR_CPU_LIMIT=-1"), -EINVAL);
	ck_assert_contains(m, "EXECUTOR_CPU_LIMIT");
	m = load_err("", ENVP((char *)"EXECUTOR_CPU_LIMIT=0.001"), -EINVAL);
	ck_assert_contains(m, "expected a number from 0.01 to 1024, got \"0.001\"");
	m = load_err("", ENVP((char *)"CAE_STATE_DIR=relative/dir"), -EINVAL);
	ck_assert_contains(m, "expected an absolute path");
	m = load_err("", ENVP((char *)"PICOCLAW_WORKER_GIT_TIMEOUT=0"), -EINVAL);
	ck_assert_contains(m, "PICOCLAW_WORKER_GIT_TIMEOUT");
	ck_assert_contains(m, "expected an integer from 1 to 3600, got \"0\"");
}
END_TEST

/* A bad value of each type is an error naming file, line and key. */
START_TEST(errors_with_file_and_line)
{
	static const struct {
		const char *yaml;
		const char *msg;
	} cases[] = {
	    {"command_executor:\n  execution:\n    timeout_seconds: abc\n",
	     "config.yaml:3: command_executor.execution.timeout_seconds: expected a positive "
	     "integer, got \"abc\""},
	    {"command_executor:\n  execution:\n    timeout_seconds: 0\n",
	     "config.yaml:3: command_executor.execution.timeout_seconds: expected an integer from "
	     "1 "
	     "to 604800, got \"0\""},
	    {"\n\ncommand_executor:\n  enabled: perhaps\n",
	     "config.yaml:4: command_executor.enabled: expected a boolean (true/false, yes/no, "
	     "on/off, 1/0), got \"perhaps\""},
	    {"command_executor:\n  docker:\n    resources:\n      memory_limit: 4x\n",
	     "config.yaml:4: command_executor.docker.resources.memory_limit: expected a size such "
	     "as 4g, 512m or a number of bytes, got \"4x\""},
	    {"command_executor:\n  docker:\n    resources:\n      cpu_limit: two\n",
	     "config.yaml:4: command_executor.docker.resources.cpu_limit: expected a positive "
	     "number, got \"two\""},
	    {"command_executor:\n  backend: podman\n",
	     "config.yaml:2: command_executor.backend: expected one of auto, docker, local, "
	     "kubernetes, got \"podman\""},
	    {"command_executor:\n  docker_host: [a, b]\n",
	     "config.yaml:2: command_executor.docker_host: expected a string, got a sequence"},
	    {"command_executor:\n  docker_host: \"\"\n",
	     "config.yaml:2: command_executor.docker_host: expected a non-empty string"},
	    {"command_executor:\n  docker:\n    network:\n      allowed_domains: example.com\n",
	     "config.yaml:4: command_executor.docker.network.allowed_domains: expected a list of "
	     "strings, got \"example.com\""},
	    {"command_executor:\n  docker:\n    network:\n      allowed_domains:\n        - a\n    "
	     "    - [b]\n",
	     "config.yaml:6: command_executor.docker.network.allowed_domains: item 2: expected a "
	     "string, got a sequence"},
	    {"command_executor:\n  environments:\n    python: p\n    Bad Name: x\n",
	     "config.yaml:4: command_executor.environments: invalid environment name \"Bad Name\""},
	    {"command_executor:\n  environments: [python]\n",
	     "config.yaml:2: command_executor.environments: expected a mapping of environment "
	     "name to image, got a sequence"},
	    {"command_executor:\n  docker: 3\n",
	     "config.yaml:2: command_executor.docker: expected a mapping, got a scalar"},
	    {"command_executor:\n  state_dir: relative\n",
	     "config.yaml:2: command_executor.state_dir: expected an absolute path, got "
	     "\"relative\""},
	    {"command_executor:\n  default_environment: rust\n",
	     "config.yaml:2: command_executor.default_environment: the default environment "
	     "\"rust\" "
	     "is not one of the configured environments (python, miniforge, node, java, go)"},
	    {"command_executor:\n  environments: {node: n}\n",
	     "config.yaml:2: command_executor.environments: the default environment \"python\" is "
	     "not one of the configured environments (node)"},
	    {"command_executor:\n  docker:\n    network: {mode: none, external_access: true}\n",
	     "command_executor.docker.network.external_access: true contradicts"},
	    {"command_executor:\n  docker:\n    network: {external_access: false, whitelist_mode: "
	     "true}\n",
	     "config.yaml:3: command_executor.docker.network.whitelist_mode: a domain allow-list "
	     "needs external access"},
	    {"command_executor:\n  local:\n    sandbox: none\n",
	     "config.yaml:3: command_executor.local.sandbox: none runs commands on this host "
	     "unconfined: it needs command_executor.local.unconfined: true"},
	    {"command_executor:\n  local:\n    sandbox_uid: 0\n",
	     "config.yaml:3: command_executor.local.sandbox_uid: "},
	    {"github:\n  token: [secret]\n",
	     "config.yaml:2: github.token: expected a string, got a sequence"},
	    {"worker:\n  git_timeout: \"1\\0\"\n", "config.yaml:2: worker.git_timeout: "},
	    {"text_editor_mcp:\n  max_file_size: 99999999999999999999999\n",
	     "config.yaml:2: text_editor_mcp.max_file_size: expected a size"},
	    {"- a\n- b\n",
	     "config.yaml:1: expected a mapping of keys at the top level, got a sequence"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *m = load_err(cases[i].yaml, no_env, -EINVAL);
		ck_assert_msg(strstr(m, cases[i].msg) != NULL, "case %zu: \"%s\" lacks \"%s\"", i,
			      m, cases[i].msg);
	}
	/* a secret's value never appears in a message */
	const char *m = load_err("github:\n  token: {x: supersecret}\n", no_env, -EINVAL);
	ck_assert(strstr(m, "supersecret") == NULL);
}
END_TEST

/* mode mcp is accepted with its server's command, tool and timeout (defaults: the npm
 * server, text_editor, 60 s); without a command, or with an empty tool, it is an error at
 * load naming the key. */
START_TEST(editor_mode_mcp_keys)
{
	cae_config *cfg = load_ok("text_editor_mcp:\n  mode: mcp\n", no_env);
	ck_assert_int_eq(cfg->text_editor_mcp.mode, CAE_CONFIG_EDITOR_MCP);
	ck_assert_int_eq(cfg->text_editor_mcp.mcp_server.command.n, 3);
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.command.items[2],
			 "mcp-server-text-editor");
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.tool, "text_editor");
	ck_assert_int_eq(cfg->text_editor_mcp.mcp_server.timeout, 60);
	cae_config_free(cfg);
	cfg = load_ok("text_editor_mcp:\n  mode: mcp\n  mcp_server:\n    command: [python3, "
		      "ed.py]\n    tool: edit\n    timeout: 5\n",
		      no_env);
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.command.items[0], "python3");
	ck_assert_str_eq(cfg->text_editor_mcp.mcp_server.tool, "edit");
	ck_assert_int_eq(cfg->text_editor_mcp.mcp_server.timeout, 5);
	cae_config_free(cfg);
	const char *m = load_err("text_editor_mcp:\n  mode: mcp\n  mcp_server:\n    command: []\n",
				 no_env, -EINVAL);
	ck_assert_contains(m, "text_editor_mcp.mcp_server.command");
	m = load_err("text_editor_mcp:\n  mode: mcp\n  mcp_server:\n    tool: \"\"\n", no_env,
		     -EINVAL);
	ck_assert_contains(m, "text_editor_mcp.mcp_server.tool");
	m = load_err("text_editor_mcp:\n  mcp_server:\n    timeout: 0\n", no_env, -EINVAL);
	ck_assert_contains(m, "text_editor_mcp.mcp_server.timeout");
	/* with the editor off, an empty command changes nothing */
	cfg = load_ok("text_editor_mcp:\n  enabled: false\n  mode: mcp\n  mcp_server:\n    "
		      "command: []\n",
		      no_env);
	cae_config_free(cfg);
}
END_TEST

START_TEST(unknown_keys_warn)
{
	_cleanup_config_ cae_config *cfg = load_ok("llm:\n  model: x\n"
						   "command_executor:\n"
						   "  enabled: true\n"
						   "  execution:\n"
						   "    timeout_secs: 5\n"
						   "  ? [complex]\n"
						   "  : 1\n",
						   no_env);
	ck_assert_uint_eq(cfg->warnings.n, 3);
	ck_assert_str_eq(cfg->warnings.items[0], "config.yaml:1: unknown key \"llm\" (ignored)");
	ck_assert_str_eq(
	    cfg->warnings.items[1],
	    "config.yaml:6: unknown key \"command_executor.execution.timeout_secs\" (ignored)");
	ck_assert_contains(cfg->warnings.items[2],
			   "config.yaml:7: a key in command_executor is a sequence");
	ck_assert_int_eq(cfg->command_executor.execution.timeout_seconds, 1800);

	/* warnings are bounded */
	char big[40000];
	size_t o = 0;
	for (int i = 0; i < 500; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "k%d: 1\n", i);
	_cleanup_config_ cae_config *many = load_ok(big, no_env);
	ck_assert_uint_eq(many->warnings.n, 101);
	ck_assert_str_eq(many->warnings.items[100], "more warnings omitted");
}
END_TEST

START_TEST(malformed_yaml)
{
	const char *m =
	    load_err("command_executor:\n  enabled: true\n   bad: [\n", no_env, -EINVAL);
	ck_assert_msg(strncmp(m, "config.yaml:3: invalid YAML:", 28) == 0 ||
			  strncmp(m, "config.yaml:4: invalid YAML:", 28) == 0,
		      "%s", m);
	m = load_err("a: \"unterminated\n", no_env, -EINVAL);
	ck_assert_contains(m, "config.yaml:");
	ck_assert_contains(m, "invalid YAML");
	m = load_err("a: 1\n---\nb: 2\n", no_env, -EINVAL);
	ck_assert_contains(m, "config.yaml:2: more than one YAML document");
	m = load_err("a: \xff\xfe\n", no_env, -EINVAL);
	ck_assert_contains(m, "invalid YAML");
	/* nesting depth is bounded */
	char deep[400];
	memset(deep, '[', 200);
	memset(deep + 200, ']', 199);
	deep[399] = '\0';
	m = load_err(deep, no_env, -EINVAL);
	ck_assert_contains(m, "nested deeper than 64 levels");
	/* size is bounded */
	size_t n = CAE_CONFIG_MAX_BYTES + 10;
	char *huge = malloc(n + 1);
	memset(huge, '#', n);
	huge[n] = '\0';
	cae_config *cfg = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_config_load_string(&cfg, huge, n, "big.yaml", no_env, &err), -EFBIG);
	ck_assert_contains(err.message, "big.yaml: larger than");
	free(huge);
}
END_TEST

START_TEST(network_modes)
{
	_cleanup_config_ cae_config *a =
	    load_ok("command_executor: {docker: {network: {external_access: false}}}\n", no_env);
	ck_assert_int_eq(a->command_executor.docker.network.mode, CAE_CONFIG_NETWORK_NONE);
	_cleanup_config_ cae_config *b =
	    load_ok("command_executor: {docker: {network: {mode: none}}}\n", no_env);
	ck_assert(!b->command_executor.docker.network.external_access);
	_cleanup_config_ cae_config *c =
	    load_ok("command_executor: {docker: {network: {mode: host}}}\n", no_env);
	ck_assert(c->command_executor.docker.network.external_access);
	ck_assert_str_eq(cae_config_network_mode_name(c->command_executor.docker.network.mode),
			 "host");
}
END_TEST

START_TEST(secrets_redacted_in_json)
{
	char *const *env = ENVP((char *)"GITHUB_PERSONAL_ACCESS_TOKEN=ghp_abcdefghijkl",
				(char *)"GITLAB_API_URL=https://user:glpass@gitlab.local/api/v4",
				(char *)"DOCKER_HOST=tcp://admin:dockpw@10.1.1.1:2376");
	_cleanup_config_ cae_config *cfg = load_ok("gitlab: {token: glpat-zzzzzzzz}\n", env);
	_cleanup_json_ json_t *j = cae_config_to_json(cfg, true);
	_cleanup_free_ char *s = json_dumps(j, 0);
	ck_assert(strstr(s, "ghp_abcdefghijkl") == NULL);
	ck_assert(strstr(s, "glpat-zzzzzzzz") == NULL);
	ck_assert(strstr(s, "glpass") == NULL);
	ck_assert(strstr(s, "dockpw") == NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "github"), "token")),
			 "***");
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(j, "gitlab"), "api_url")),
	    "https://***@gitlab.local/api/v4");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "command_executor"),
							   "docker_host")),
			 "tcp://***@10.1.1.1:2376");
	/* unredacted: the real values; unset tokens are null either way */
	_cleanup_json_ json_t *raw = cae_config_to_json(cfg, false);
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(raw, "gitlab"), "token")),
	    "glpat-zzzzzzzz");
	_cleanup_config_ cae_config *d = load_ok("", no_env);
	_cleanup_json_ json_t *dj = cae_config_to_json(d, true);
	ck_assert(json_is_null(json_object_get(json_object_get(dj, "github"), "token")));
}
END_TEST

START_TEST(set_by_key)
{
	_cleanup_config_ cae_config *cfg = cae_config_defaults(no_env);
	cae_error err = {0};
	ck_assert_int_eq(
	    cae_config_set(cfg, "command_executor.execution.timeout_seconds", "42", &err), 0);
	ck_assert_int_eq(cfg->command_executor.execution.timeout_seconds, 42);
	ck_assert_int_eq(cae_config_set(cfg, "command_executor.docker.network.allowed_domains",
					"a.com, b.org,,", &err),
			 0);
	ck_assert_uint_eq(cfg->command_executor.docker.network.allowed_domains.n, 2);
	ck_assert_str_eq(cfg->command_executor.docker.network.allowed_domains.items[1], "b.org");
	ck_assert_int_eq(
	    cae_config_set(cfg, "command_executor.environments", "go=g:1, node=n:2", &err),
	    -EINVAL);
	ck_assert_contains(err.message, "the default environment \"python\"");
	ck_assert_uint_eq(cfg->command_executor.n_environments, 5); /* unchanged */
	_cleanup_config_ cae_config *copy = cae_config_dup(cfg);
	_cleanup_json_ json_t *j1 = cae_config_to_json(cfg, false);
	_cleanup_json_ json_t *j2 = cae_config_to_json(copy, false);
	ck_assert(json_equal(j1, j2));
	ck_assert_int_eq(cae_config_set(cfg, "command_executor.default_environment", "rust", &err),
			 -EINVAL);
	ck_assert_str_eq(cfg->command_executor.default_environment, "python");
	ck_assert_int_eq(cae_config_set(cfg, "worker.shell_timeout", "9", &err), 0);
	ck_assert_int_eq(cfg->worker.command_timeout, 9);
	ck_assert_int_eq(cae_config_set(cfg, "command_executor.docker.network.mode", "none", &err),
			 0);
	ck_assert(!cfg->command_executor.docker.network.external_access);
	ck_assert_int_eq(
	    cae_config_set(cfg, "command_executor.docker.network.external_access", "true", &err),
	    0);
	ck_assert_int_eq(cfg->command_executor.docker.network.mode, CAE_CONFIG_NETWORK_BRIDGE);
	ck_assert_int_eq(cae_config_set(cfg, "no.such.key", "1", &err), -EINVAL);
	ck_assert_contains(err.message, "unknown config key");
	ck_assert_int_eq(cae_config_set(cfg, "worker.git_timeout", "x", &err), -EINVAL);
	ck_assert_str_eq(err.message,
			 "worker.git_timeout: expected an integer from 1 to 3600, got \"x\"");
	ck_assert_int_eq(cfg->worker.git_timeout, 30);
}
END_TEST

START_TEST(parse_sizes_and_bools)
{
	uint64_t v;
	ck_assert_int_eq(cae_config_parse_size("4g", &v), 0);
	ck_assert_uint_eq(v, 4ull << 30);
	ck_assert_int_eq(cae_config_parse_size("512M", &v), 0);
	ck_assert_uint_eq(v, 512ull << 20);
	ck_assert_int_eq(cae_config_parse_size("1.5GiB", &v), 0);
	ck_assert_uint_eq(v, 3ull << 29);
	ck_assert_int_eq(cae_config_parse_size("10 kb", &v), 0);
	ck_assert_uint_eq(v, 10240);
	ck_assert_int_eq(cae_config_parse_size("1048576", &v), 0);
	ck_assert_uint_eq(v, 1048576);
	ck_assert_int_eq(cae_config_parse_size("0.99999999999g", &v), 0); /* rounded at 9 digits */
	ck_assert_uint_eq(v, 1ull << 30);
	ck_assert_int_eq(cae_config_parse_size("7b", &v), 0);
	ck_assert_uint_eq(v, 7);
	ck_assert_int_eq(cae_config_parse_size("", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("g", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("-1", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("1x", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("1.", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("99999999999t", &v), -EINVAL);
	ck_assert_int_eq(cae_config_parse_size("18446744073709551616", &v), -EINVAL);
	bool b;
	const char *yes[] = {"true", "TRUE", "yes", "On", "1"};
	const char *no[] = {"false", "No", "off", "0"};
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		ck_assert_int_eq(cae_config_parse_bool(yes[i], &b), 0);
		ck_assert(b);
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		ck_assert_int_eq(cae_config_parse_bool(no[i], &b), 0);
		ck_assert(!b);
	}
	ck_assert_int_eq(cae_config_parse_bool("2", &b), -EINVAL);
	ck_assert_int_eq(cae_config_parse_bool("", &b), -EINVAL);
}
END_TEST

/* The file lookup: explicit path, CAE_CONFIG, ./config.yaml, $XDG_CONFIG_HOME/cae/config.yaml. */
START_TEST(file_lookup)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	ck_assert_int_eq(chdir(d), 0);
	cae_config *cfg = NULL;
	cae_error err = {0};
	char xdg_env[4200], cae_env[4200];
	snprintf(xdg_env, sizeof(xdg_env), "XDG_CONFIG_HOME=%s/xdg", d);

	/* nothing anywhere: defaults */
	ck_assert_int_eq(cae_config_load(&cfg, NULL, ENVP(xdg_env), &err), 0);
	ck_assert_ptr_null(cfg->source);
	cae_config_free(cfg);

	/* the XDG file */
	ck_assert_int_eq(cae__mkdir_p("xdg/cae", 0755), 0);
	tu_write(d, "xdg/cae/config.yaml", "worker: {git_timeout: 11}\n");
	ck_assert_int_eq(cae_config_load(&cfg, NULL, ENVP(xdg_env), &err), 0);
	ck_assert_int_eq(cfg->worker.git_timeout, 11);
	ck_assert_contains(cfg->source, "/xdg/cae/config.yaml");
	cae_config_free(cfg);

	/* ./config.yaml wins over XDG */
	tu_write(d, "config.yaml", "worker: {git_timeout: 12}\n");
	ck_assert_int_eq(cae_config_load(&cfg, NULL, ENVP(xdg_env), &err), 0);
	ck_assert_int_eq(cfg->worker.git_timeout, 12);
	ck_assert_str_eq(cfg->source, "config.yaml");
	cae_config_free(cfg);

	/* CAE_CONFIG wins over ./config.yaml; must exist */
	tu_write(d, "other.yaml", "worker: {git_timeout: 13}\n");
	snprintf(cae_env, sizeof(cae_env), "CAE_CONFIG=%s/other.yaml", d);
	ck_assert_int_eq(cae_config_load(&cfg, NULL, ENVP(xdg_env, cae_env), &err), 0);
	ck_assert_int_eq(cfg->worker.git_timeout, 13);
	cae_config_free(cfg);
	ck_assert_int_eq(
	    cae_config_load(&cfg, NULL, ENVP((char *)"CAE_CONFIG=/nonexistent/c.yaml"), &err),
	    -ENOENT);
	ck_assert_ptr_null(cfg);
	ck_assert_str_eq(err.message, "/nonexistent/c.yaml: config file not found");

	/* an explicit path wins over everything; errors carry its name */
	tu_write(d, "bad.yaml", "worker:\n  git_timeout: soon\n");
	ck_assert_int_eq(cae_config_load(&cfg, "bad.yaml", ENVP(cae_env), &err), -EINVAL);
	ck_assert_str_eq(err.message,
			 "bad.yaml:2: worker.git_timeout: expected an integer from 1 to "
			 "3600, got \"soon\"");
	ck_assert_int_eq(cae_config_load(&cfg, "missing.yaml", no_env, &err), -ENOENT);
	ck_assert_int_eq(cae_config_load(&cfg, ".", no_env, &err), -EISDIR);
	cae__rm_rf(d);
}
END_TEST

/* command_executor.protected_paths: .git/hooks by default; paths inside the workspace only,
 * whatever the spelling of an escape; a bounded number; [] allowed (nothing protected). */
START_TEST(protected_paths)
{
	_cleanup_config_ cae_config *d = load_ok("", no_env);
	ck_assert_uint_eq(d->command_executor.protected_paths.n, 1);
	ck_assert_str_eq(d->command_executor.protected_paths.items[0], ".git/hooks");
	_cleanup_config_ cae_config *cfg =
	    load_ok("command_executor:\n  protected_paths:\n    - .git/hooks\n    - ci/deploy.sh\n",
		    no_env);
	ck_assert_uint_eq(cfg->command_executor.protected_paths.n, 2);
	ck_assert_str_eq(cfg->command_executor.protected_paths.items[1], "ci/deploy.sh");
	json_t *j = cae_config_to_json(cfg, true);
	json_t *pp = json_object_get(json_object_get(j, "command_executor"), "protected_paths");
	ck_assert_uint_eq(json_array_size(pp), 2);
	json_decref(j);
	_cleanup_config_ cae_config *none =
	    load_ok("command_executor:\n  protected_paths: []\n", no_env);
	ck_assert_uint_eq(none->command_executor.protected_paths.n, 0);
	static const char *const bad[] = {"/etc/passwd", "..",	"../x", ".git/../../x", "a/..", ".",
					  "./",		 "./.", "//"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cae_error err = {0};
		ck_assert_msg(cae_config_set(cfg, "command_executor.protected_paths", bad[i],
					     &err) == -EINVAL,
			      "%s accepted", bad[i]);
		ck_assert_contains(err.message, "command_executor.protected_paths");
		/* the value before stays */
		ck_assert_uint_eq(cfg->command_executor.protected_paths.n, 2);
	}
	const char *m = load_err("command_executor:\n  protected_paths:\n    - ok\n    - ../x\n",
				 no_env, -EINVAL);
	ck_assert_contains(m, "command_executor.protected_paths: item 2: \"../x\" has a '..'");
	char many[4096] = "command_executor:\n  protected_paths:\n";
	for (int i = 0; i <= CAE_CONFIG_MAX_PROTECTED; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "    - p%d\n", i);
	m = load_err(many, no_env, -EINVAL);
	ck_assert_contains(m, "at most 32");
}
END_TEST

/* The network policy's lists (cae/net.h): a malformed entry is an error naming the file, the
 * line, the key and the item; good entries load, and the filter is on with an allow-list or
 * a deny-list. */
START_TEST(network_policy_entries)
{
	static const struct {
		const char *key, *value, *why;
	} bad[] = {
	    {"allowed_domains", "\"\"", "empty"},
	    {"allowed_domains", "\"exa mple.com\"", "blank"},
	    {"allowed_domains", "\"*.*\"", "'*'"},
	    {"allowed_domains", "https://example.com", "has a scheme"},
	    {"allowed_domains", "example.com/x", "has a path"},
	    {"allowed_domains", "\"example.com:70000\"", "port out of range"},
	    {"allowed_domains", "\"example.com:0\"", "port out of range"},
	    {"allowed_domains", "10.0.0.1", "addresses go in allowed_addresses"},
	    {"denied_domains", "\"*\"", "'*'"},
	    {"allowed_addresses", "10.0.0.0/33", "prefix length out of range"},
	    {"allowed_addresses", "localhost", "not an IPv4 or IPv6 address"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char yaml[512], want[256];
		snprintf(yaml, sizeof(yaml),
			 "command_executor:\n  docker:\n    network:\n      whitelist_mode: "
			 "true\n      %s:\n        - ok.example.com\n        - %s\n",
			 bad[i].key, bad[i].value);
		if (strcmp(bad[i].key, "allowed_addresses") == 0)
			snprintf(yaml, sizeof(yaml),
				 "command_executor:\n  docker:\n    network:\n      %s:\n        - "
				 "127.0.0.1\n        - %s\n",
				 bad[i].key, bad[i].value);
		const char *m = load_err(yaml, no_env, -EINVAL);
		/* the line of the key (or of the item, for what the YAML walk refuses) */
		snprintf(want, sizeof(want),
			 "command_executor.docker.network.%s: item 2: ", bad[i].key);
		ck_assert_msg(strncmp(m, "config.yaml:", 12) == 0 && strstr(m, want) &&
				  strstr(m, bad[i].why),
			      "%zu: %s", i, m);
	}
	_cleanup_config_ cae_config *cfg = load_ok(
	    "command_executor:\n  docker:\n    network:\n      whitelist_mode: true\n"
	    "      allowed_domains: [pypi.org, \"*.npmjs.org\", \"github.com:443\"]\n"
	    "      denied_domains: [evil.npmjs.org]\n      allowed_addresses: [127.0.0.1/32, "
	    "\"fd00::/8\"]\n",
	    no_env);
	ck_assert_uint_eq(cfg->command_executor.docker.network.allowed_domains.n, 3);
	ck_assert_uint_eq(cfg->command_executor.docker.network.denied_domains.n, 1);
	ck_assert_str_eq(cfg->command_executor.docker.network.allowed_addresses.items[1],
			 "fd00::/8");
	ck_assert(cae_net_config_filtered(cfg));
	_cleanup_config_ cae_config *deny_only = load_ok(
	    "command_executor:\n  docker:\n    network:\n      denied_domains: [x.example]\n",
	    no_env);
	ck_assert(cae_net_config_filtered(deny_only));
	_cleanup_config_ cae_config *plain = load_ok("command_executor: {}\n", no_env);
	ck_assert(!cae_net_config_filtered(plain));
	/* cae_config_set keeps the value before on a bad entry */
	cae_error err = {0};
	ck_assert_int_eq(
	    cae_config_set(cfg, "command_executor.docker.network.denied_domains", "http://x", &err),
	    -EINVAL);
	ck_assert_uint_eq(cfg->command_executor.docker.network.denied_domains.n, 1);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, default_state_dir_rules);
	tcase_add_test(tc, every_key);
	tcase_add_test(tc, local_repo_roots);
	tcase_add_test(tc, instance_rules);
	tcase_add_test(tc, json_round_trip);
	tcase_add_test(tc, aliases_and_anchors);
	tcase_add_test(tc, env_overrides);
	tcase_add_test(tc, env_errors_name_the_variable);
	tcase_add_test(tc, errors_with_file_and_line);
	tcase_add_test(tc, unknown_keys_warn);
	tcase_add_test(tc, editor_mode_mcp_keys);
	tcase_add_test(tc, malformed_yaml);
	tcase_add_test(tc, network_modes);
	tcase_add_test(tc, secrets_redacted_in_json);
	tcase_add_test(tc, set_by_key);
	tcase_add_test(tc, parse_sizes_and_bools);
	tcase_add_test(tc, file_lookup);
	tcase_add_test(tc, protected_paths);
	tcase_add_test(tc, network_policy_entries);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
