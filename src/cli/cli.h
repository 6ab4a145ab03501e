/* Internal to the CLI: the subcommand table and what subcommands share. Each subcommand lives
 * in its own file, takes argv with argv[0] = its own name, and returns the exit status:
 * 0 success, 1 failure (or the command's own status for exec/run), 2 usage error. */
#ifndef CAE_CLI_H
#define CAE_CLI_H

#include <getopt.h>
#include <jansson.h>

#include "cae/config.h"
#include "cae/log.h"
#include "cae/session.h"

struct cae_cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

int cae_cli_version(int argc, char **argv);
int cae_cli_env(int argc, char **argv);
int cae_cli_prepare(int argc, char **argv);
int cae_cli_exec(int argc, char **argv);
int cae_cli_cleanup(int argc, char **argv);
int cae_cli_gc(int argc, char **argv);
int cae_cli_pool(int argc, char **argv);
int cae_cli_cache(int argc, char **argv);
int cae_cli_run(int argc, char **argv);
int cae_cli_tools(int argc, char **argv);
int cae_cli_prompt(int argc, char **argv);
int cae_cli_plan(int argc, char **argv);
int cae_cli_images(int argc, char **argv);
int cae_cli_config(int argc, char **argv);
int cae_cli_mcp(int argc, char **argv);
int cae_cli_patch(int argc, char **argv);
int cae_cli_edit(int argc, char **argv);
int cae_cli_doctor(int argc, char **argv);
int cae_cli_port_forward(int argc, char **argv);
int cae_cli_snapshot(int argc, char **argv);
int cae_cli_restore(int argc, char **argv);
int cae_cli_fork(int argc, char **argv);

/* Options every subcommand that opens a session accepts. */
enum {
	CAE_CLI_OPT_CONFIG = 1000,
	CAE_CLI_OPT_BACKEND,
	CAE_CLI_OPT_STATE_DIR,
	CAE_CLI_OPT_FIRST_LOCAL, /* subcommands number their own long options from here */
};
#define CAE_CLI_COMMON_LONGOPTS                                                                    \
	{"config", required_argument, NULL, CAE_CLI_OPT_CONFIG},                                   \
	    {"backend", required_argument, NULL, CAE_CLI_OPT_BACKEND},                             \
	    {"state-dir", required_argument, NULL, CAE_CLI_OPT_STATE_DIR},                         \
	{                                                                                          \
		"help", no_argument, NULL, 'h'                                                     \
	}
#define CAE_CLI_COMMON_HELP                                                                        \
	"  --config FILE      config.yaml to use (default: $CAE_CONFIG, ./config.yaml, ...)\n"     \
	"  --backend NAME     auto, docker, local or kubernetes (default: "                        \
	"command_executor.backend)\n"                                                              \
	"  --state-dir DIR    where local environments and their metadata live\n"                  \
	"  -h, --help         this help\n"

typedef struct cae_cli_common {
	const char *config;
	const char *backend;
	const char *state_dir;
} cae_cli_common;

/* Returns 1 when opt was a common option (recorded in c), else 0. */
int cae_cli_common_option(cae_cli_common *c, int opt, const char *arg);
/* Loads the config with the common overrides; prints the error and returns < 0 on failure. */
int cae_cli_load_config(const cae_cli_common *c, cae_config **out);
/* Opens a session (prints the error on failure). */
int cae_cli_open(const cae_cli_common *c, cae_session **out);
/* The environment a command means: given (--uuid), else $CAE_TASK_UUID, else the only one
 * there is; otherwise prints why and hint ("give --uuid UUID") and fails. *out is new. */
int cae_cli_pick_uuid(cae_session *s, const char *given, const char *hint, char **out);
/* The CLI's logger (JSON lines on stderr, level from CAE_LOG_LEVEL, default warn). */
cae_log *cae_cli_log(void);
void cae_cli_log_free(void);
/* Reads a JSON document from a file or "-" (stdin). New reference or NULL with err set. */
json_t *cae_cli_read_json(const char *path, cae_error *err);
/* Prints "cae: WHAT: KIND: message" on stderr (what NULL: no "WHAT: "), KIND the error's
 * class (cae_error_kind: NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE, ..., INTERNAL). */
void cae_cli_error(const char *what, const cae_error *err);
/* Pretty-prints JSON on stdout. */
void cae_cli_print_json(json_t *j);
/* Prints text (NULL: nothing) on stdout, ending with a newline. */
void cae_cli_print_text(const char *text);
/* Makes the session's current environment a workspace used as is (workspace, local backend)
 * or the environment cae_cli_pick_uuid picks from uuid (*id new); prints why and returns < 0
 * when neither can be. */
int cae_cli_use_environment(cae_session *s, const char *uuid, const char *workspace, char **id);

/* Task options shared by prepare and run. */
enum {
	OPT_TASK = CAE_CLI_OPT_FIRST_LOCAL,
	OPT_REPO,
	OPT_UUID,
	OPT_KIND,
	OPT_BRANCH,
	OPT_TARGET,
	OPT_PLATFORM,
	OPT_ENV,
	OPT_WORKSPACE,
	OPT_HOURS,
	OPT_ALL_INSTANCES, /* list, gc, pool status and drain: every instance's environments */
	OPT_FORCE,	   /* prepare: replace an environment even if that loses something */
	OPT_LAST_SHARED,   /* a subcommand's own options start here */
};

#define ALL_INSTANCES_HELP                                                                         \
	"  --all-instances    every cae instance's environments, not only this one's "             \
	"(command_executor.instance)\n"

/* Options that describe a task, shared by prepare and run. */
typedef struct task_opts {
	const char *task_file, *repo, *uuid, *kind, *branch, *target, *platform, *env, *workspace;
	bool force; /* prepare: --force */
} task_opts;

#define TASK_LONGOPTS                                                                              \
	{"task", required_argument, NULL, OPT_TASK}, {"repo", required_argument, NULL, OPT_REPO},  \
	    {"uuid", required_argument, NULL, OPT_UUID},                                           \
	    {"kind", required_argument, NULL, OPT_KIND},                                           \
	    {"branch", required_argument, NULL, OPT_BRANCH},                                       \
	    {"target-branch", required_argument, NULL, OPT_TARGET},                                \
	    {"platform", required_argument, NULL, OPT_PLATFORM},                                   \
	    {"env", required_argument, NULL, OPT_ENV},                                             \
	{                                                                                          \
		"workspace", required_argument, NULL, OPT_WORKSPACE                                \
	}

#define TASK_HELP                                                                                  \
	"  --task FILE        the task as JSON ({uuid, repo, kind, branch, target_branch}; - = "   \
	"stdin)\n"                                                                                 \
	"  --repo URL|PATH    repository to clone (a URL or a local path)\n"                       \
	"  --uuid UUID        task uuid (default for run: a random one)\n"                         \
	"  --kind KIND        issue (default) or pull_request\n"                                   \
	"  --branch B         pull request: the source branch\n"                                   \
	"  --target-branch T  pull request: the target branch\n"                                   \
	"  --platform P       github or gitlab (selects the token)\n"                              \
	"  --env NAME         environment (python, node, java, go, miniforge; default python)\n"   \
	"  --workspace DIR    use an existing directory as is (local backend, no clone)\n"

int cae_cli_task_option(task_opts *t, int opt, const char *arg);
/* Builds the task from --task or the flags; *generated receives a uuid it made (free it). */
int cae_cli_build_task(const task_opts *t, bool gen_uuid, cae_task *task, char **generated);
/* Prepares the task (with --workspace: registers the directory); *info gets ContainerInfo. */
int cae_cli_do_prepare(cae_session *s, const task_opts *t, const cae_task *task, json_t **info);

#endif
