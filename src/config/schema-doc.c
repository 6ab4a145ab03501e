/* The config's reference text: what each key of the schema (schema.c) means, one line per key
 * (sections too), taken from cae/config.h. `cae config reference` puts it next to what the
 * schema itself says (type, bounds, default, environment variable) to make docs/config.md,
 * and refuses a key without a line here, so the reference cannot miss a key. Aliases need no
 * line (they are listed with their key). */
#include "config/config-internal.h"

#include "base/banned.h"

const struct cfg_doc cfg_docs[] = {
    {"command_executor", "The command executor: environments, backends and their bounds."},
    {CE "enabled", "The command tools are offered (the command executor is cae's product)."},
    {CE "backend",
     "Where environments live: `auto` picks kubernetes when `command_executor.kubernetes` names "
     "a namespace or a kubeconfig, else docker when an engine answers, else local."},
    {CE "docker_host", "The Docker Engine API endpoint (`unix://` socket or `tcp://`)."},
    {CE "environments",
     "Environment name to image (`python`, `miniforge`, `node`, `java`, `go` → "
     "`coding-agent-executor-<name>:latest`); at most 64; names `[a-z0-9][a-z0-9_.-]*`, at most "
     "63 characters."},
    {CE "default_environment", "The environment a task gets when it names none; must be a name "
			       "of `environments`."},
    {CE "state_dir",
     "Absolute path of cae's state (local workspaces, metadata, locks). Default: "
     "`$XDG_STATE_HOME/cae`, else `$HOME/.local/state/cae`, else `/var/lib/cae` when `HOME` is "
     "unset, the same rule for root and other users. A leading `~/` is expanded."},
    {CE "instance",
     "Which cae instance this is: recorded on every environment it makes (a docker and pod "
     "label, the local metadata, pool members); the CLI, `cae gc`, `cae mcp`'s collector and "
     "the warm pool act only on their own instance's environments (`--all-instances` widens "
     "list, gc and pool drain). 1-63 of `[A-Za-z0-9._-]`, a letter or digit at both ends. "
     "Unset: derived from the state directory."},
    {CE "local_repo_roots",
     "Directories under which `environment_prepare` over MCP (the model's request) may name a "
     "local repository (its real path under one of these); URLs are always accepted, other "
     "local paths and `file://` refused. The operator's own `--repo`, `--workspace` and "
     "`--task` are not limited. Absolute paths; a leading `~/` is expanded."},
    {CE "protected_paths",
     "Workspace-relative paths that commands, the text editor and the patch worker may not "
     "change: each, and everything below it, is read-only on every backend, whatever the "
     "spelling (links, `.`, case). No `..`, not absolute, not the workspace itself; at most "
     "32. `[]` protects nothing."},
    {CE "mcp_server", "An external command-executor MCP server, read so that such config files "
		      "load; cae does not run it."},
    {CE "mcp_server.name", "Its name (informative)."},
    {CE "mcp_server.command", "Its command (not run)."},
    {CE "docker", "Containers (docker), and the bounds every backend takes from them."},
    {CE "docker.base_image", "The image of an environment name missing from `environments` (and "
			     "the only image when the map is empty)."},
    {CE "docker.resources", "Bounds of an environment, on every backend."},
    {CE "docker.resources.cpu_limit", "CPUs (0.01 to 1024)."},
    {CE "docker.resources.memory_limit", "Memory (at least 6 MiB)."},
    {CE "docker.resources.disk_limit",
     "Disk of a workspace; `0` = no limit. Local: a loop file system when cae is root, else "
     "each file only; docker: the storage driver's size option or a loop file system; "
     "kubernetes: the emptyDir's `sizeLimit`."},
    {CE "docker.resources.pids_limit", "Processes."},
    {CE "docker.network", "The network of an environment, and the one network policy of every "
			  "backend (`cae/net.h` says what the entries are and how they match)."},
    {CE "docker.network.mode",
     "`bridge`, `none` or `host`. `external_access: false` without an explicit mode means "
     "`none`; mode `none` means `external_access` false."},
    {CE "docker.network.external_access", "Commands may reach the network."},
    {CE "docker.network.whitelist_mode",
     "Only the names of `allowed_domains` are reachable, through cae's filtering proxy "
     "(enforced by the local backend; docker and kubernetes warn that they do not enforce it "
     "yet)."},
    {CE "docker.network.allowed_domains", "Names reachable in whitelist mode (`example.com`, "
					  "`*.example.com:443`)."},
    {CE "docker.network.denied_domains", "Names refused even when allowed (non-empty: the proxy "
					 "is on even without `whitelist_mode`)."},
    {CE "docker.network.allowed_addresses",
     "Addresses (CIDRs) the proxy may connect to although they are loopback, private, "
     "link-local, unique-local or metadata addresses, and IP literals it lets through "
     "(`127.0.0.1/32`)."},
    {CE "docker.helper_lifetime_seconds",
     "A container's cae-helper stops it after this long without a manager connected (a leaked "
     "container ends by itself; the next command starts it again); `0`: never."},
    {CE "docker.max_concurrent_engine_ops",
     "Container create, start, stop and remove of every cae process using this state directory "
     "run at most this many at a time (lock files under the state directory); the clone and "
     "commands are not limited."},
    {CE "docker.mount_docker_socket", "Mount the engine's socket into containers (a warning is "
				      "due when true)."},
    {CE "pool",
     "The warm pool: containers (docker) or pods (kubernetes) started ahead for each "
     "environment of `environments` (`[]`: the default one), kept at `size` each, never handed "
     "out past `max_age_seconds`."},
    {CE "pool.size", "Members kept per environment; `0`: no pool."},
    {CE "pool.max_age_seconds", "A member older than this is never handed out."},
    {CE "pool.environments", "The environments pooled (`[]`: the default one)."},
    {CE "kubernetes", "The kubernetes backend; its pods take `docker.resources`' limits."},
    {CE "kubernetes.namespace",
     "Unset: the kubeconfig context's, else `default`. Set (or `kubeconfig` set): backend "
     "`auto` picks kubernetes."},
    {CE "kubernetes.kubeconfig", "Unset: `$KUBECONFIG`, the pod's service account, "
				 "`~/.kube/config`."},
    {CE "kubernetes.context", "Unset: the kubeconfig's current-context."},
    {CE "kubernetes.active_deadline_seconds", "A pod's lifetime bound."},
    {CE "kubernetes.node_name", "Unset: the scheduler places pods; set: bound to that node."},
    {CE "kubernetes.image_pull_policy", "The pods' `imagePullPolicy`."},
    {CE "kubernetes.protect_with_root_sidecar",
     "`protected_paths` are made root's by a short-lived root container of the pod; false "
     "(clusters that refuse root containers): not enforced for commands, with a warning."},
    {CE "kubernetes.require_network_policy",
     "A pod whose network is filtered or none gets a NetworkPolicy denying its egress (it "
     "needs `networkpolicies` create and delete in the namespace); false: without that "
     "permission the prepare warns (`kubernetes.network_policy_failed`); true: it fails."},
    {CE "clone", "How a task's repository is cloned."},
    {CE "clone.shallow", "Shallow clones."},
    {CE "clone.depth", "Their depth."},
    {CE "clone.auto_install_deps", "Install the project's dependencies after the clone."},
    {CE "clone.timeout_seconds", "The clone's bound."},
    {CE "clone.ssh_identity_file",
     "The only key ssh may use for git on this host (the mirror cache, the local backend's "
     "clone, a local repository's bundle); unset: none (no agent, no `~/.ssh` either way)."},
    {CE "clone.ssh_known_hosts_file", "The host keys ssh accepts there, besides the system's "
				      "`/etc/ssh/ssh_known_hosts`; unset: those only (never "
				      "`~/.ssh`)."},
    {CE "clone.mirror_cache", "A bare mirror of each remote repository under "
			      "`<state_dir>/mirrors/`, fetched on this host before each clone, "
			      "which then copies local objects."},
    {CE "clone.mirror_cache.enabled", "The mirror cache is used."},
    {CE "clone.mirror_cache.max_age_hours", "`cae cache prune` removes mirrors unused for "
					    "longer."},
    {CE "package_cache",
     "Package caches shared by this instance's environments on this host "
     "(`<state_dir>/package-cache/<instance>/`), read and filled by the "
     "environments' installs (local and docker with the engine on this host). "
     "Only caches whose tool verifies what it reads are shared read-write "
     "(npm's); what `npm ci` installs of a lock file that runs no code is "
     "shared read-only (local), and Go's build cache (filled by cae alone with "
     "the standard library, on the host for local, in a container of each Go "
     "image for docker, in a pod of each Go image for kubernetes; each "
     "environment gets a copy), and Go's modules (a "
     "module proxy on disk at `/cache/go-mod`, first on `GOPROXY`, filled by "
     "cae alone with `go mod download` of the project's `go.mod` and `go.sum` "
     "and the host's go, from the operator's `GOPROXY`; go checks what it takes "
     "against `go.sum`), and pip's wheels (`/cache/pip-wheels`, named by "
     "`PIP_FIND_LINKS`, filled by cae alone with `pip download "
     "--only-binary=:all:` of the project's `requirements.txt` from the "
     "operator's `PIP_INDEX_URL`; checked only where the project pins hashes), "
     "and Maven's release artifacts (a repository at `/cache/maven` that "
     "cae's `settings.xml` puts first, filled by cae alone with the remote's "
     "bytes, checked against its checksums, of the files an environment with "
     "the network resolved); pip's HTTP cache and each environment's Maven "
     "local repository are not (nothing checks what they hold when it is "
     "read)."},
    {CE "package_cache.enabled", "Share the package caches (off: each environment has its own)."},
    {CE "package_cache.max_age_hours", "`cae cache prune` removes caches unused for longer."},
    {CE "package_cache.max_size", "... then the least recently used ones until the rest take at "
				  "most this (`0`: no bound)."},
    {CE "package_cache.maven_remote",
     "The Maven repository cae fetches the shared Maven artifacts from (http or https): "
     "every task of the instance reads what it serves to cae."},
    {CE "snapshots", "Snapshots of an environment (`cae snapshot`, `environment_snapshot`), kept "
		     "in its state directory and removed with it."},
    {CE "snapshots.max_per_environment", "A snapshot past this many of one environment is "
					 "refused (`0`: no snapshots)."},
    {CE "snapshots.max_age_hours", "`cae gc` and the collector remove snapshots older than this "
				   "(`0`: kept as long as their environment)."},
    {CE "snapshots.max_size", "A snapshot that would make one environment's snapshots take more "
			      "of the disk than this is refused (`0`: no bound)."},
    {CE "git",
     "The identity of the commits an agent makes in an environment (`git commit` works as the "
     "prompts ask, on every backend): the environment's own git configuration (the local "
     "sandbox's `/etc/gitconfig`, a container's or pod's `~/.gitconfig` when it sets none), "
     "never the project's; the agent's own `git config` wins."},
    {CE "git.user_name", "`user.name` (one line)."},
    {CE "git.user_email", "`user.email` (one line)."},
    {CE "execution", "Commands."},
    {CE "execution.timeout_seconds", "A command's timeout."},
    {CE "execution.max_output_size", "Bytes kept per stream (stdout, stderr)."},
    {CE "execution.truncate", "`head` keeps the beginning; `head_tail` the beginning and the end "
			      "with an omission marker."},
    {CE "sessions", "Process sessions (the `process_*` tools)."},
    {CE "sessions.max_per_environment", "Sessions running at once in one environment; `0`: the "
					"process tools are off."},
    {CE "sessions.buffer_size", "Output of a session kept unread; past it the oldest is dropped "
				"(and the next read says how much)."},
    {CE "sessions.share_environments",
     "false: over MCP, the model's tools act only on the session's own environments (prepared "
     "by it, or given at start with `--task`/`--workspace`); another task uuid is refused as "
     "one that does not exist. true: any environment of this instance."},
    {CE "cleanup", "Collection of stale environments."},
    {CE "cleanup.interval_hours", "`cae mcp` removes stale environments when it starts and then "
				  "this often; `0`: never by itself (`cae gc` still does)."},
    {CE "cleanup.stale_threshold_hours", "An environment older than this is stale."},
    {CE "cleanup.on_session_end", "`cae mcp` removes, when it ends, the environments it prepared "
				  "that are still the ones it prepared."},
    {CE "allowed_commands", "The command policy's lists (the deny list is always enforced)."},
    {CE "allowed_commands.use_default", "Start from the default allow list."},
    {CE "allowed_commands.additional", "Programs added to the allow list."},
    {CE "allowed_commands.exclude", "Programs taken out of it."},
    {CE "allowed_commands.custom_list", "The allow list when `use_default` is false."},
    {CE "allowed_commands.enforce", "Only allow-listed programs run; false: only the deny list "
				    "is enforced."},
    {CE "local", "The local backend."},
    {CE "local.sandbox", "`auto`: bubblewrap when it can confine here, else commands are refused "
			 "unless `unconfined` is true. `none` requires `unconfined: true`."},
    {CE "local.network",
     "false: no network inside the sandbox; true: the host's network (the local spelling of "
     "`docker.network.external_access`, whose default stays false here). A filtered network "
     "(`whitelist_mode` or `denied_domains`) wins over it."},
    {CE "local.unconfined", "false: never run commands outside a sandbox."},
    {CE "local.sandbox_uid", "The host uid (and gid) sandboxed commands run as when cae runs as "
			     "root; inside they are uid 1000. Never 0."},
    {"text_editor_mcp", "The text editor tool."},
    {TE "enabled", "The text editor tool is offered."},
    {TE "mode", "`native`: cae's own editor (cae-helper); `mcp`: `text_editor` calls are "
		"forwarded to a stdio MCP text-editor server run inside the environment."},
    {TE "mcp_server", "The external editor server of mode `mcp`."},
    {TE "mcp_server.name", "Its name."},
    {TE "mcp_server.command", "Its argv, run like a command in the environment's workspace (its "
			      "PATH, confinement and user); its stdio is the MCP channel."},
    {TE "mcp_server.tool", "The server's tool that `text_editor` calls are forwarded to (the "
			   "command an argument); a server with `<tool>_view`, `<tool>_create`, "
			   "... instead gets those."},
    {TE "mcp_server.timeout", "Seconds a call (the server's start and handshake included) may "
			      "take; past it the call fails and the server is ended, to be "
			      "started again by the next call."},
    {TE "max_file_size", "Larger files are refused for view and edit."},
    {TE "undo_depth", "Edits per file that can be undone (`0`: no undo)."},
    {TE "undo_max_bytes", "Undo history per environment."},
    {TE "view_max_chars", "Characters per view result."},
    {"worker", "The patch worker (`apply_patch`)."},
    {"worker.enabled", "The patch worker tool is offered."},
    {"worker.auto_commit", "Commit after a successful patch."},
    {"worker.commit_message_prefix", "The auto-commit subject's prefix."},
    {"worker.command_timeout", "Seconds for a patch's shell commands."},
    {"worker.git_timeout", "Seconds for a patch's git operations."},
    {"worker.stop_on_error", "false: continue mode (later commands still run)."},
    {"worker.dry_run", "Only say what a patch would do."},
    {"worker.rollback", "Undo a failed patch."},
    {"github", "GitHub."},
    {"github.token", "The token for clones and pushes (secret: never shown)."},
    {"gitlab", "GitLab."},
    {"gitlab.token", "The token for clones and pushes (secret: never shown)."},
    {"gitlab.api_url", "The API's URL."},
    {"gitlab.ssl_verify", "Verify the API's TLS certificate."},
};

const size_t cfg_ndocs = ARRAY_SIZE(cfg_docs);
