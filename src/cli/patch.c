/* cae patch: the patch worker (apply_patch) from the command line. */
#include "cli/cli.h"

#include "base/fs.h"
#include "base/macro.h"
#include "cae/patch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

enum {
	OPT_P_UUID = CAE_CLI_OPT_FIRST_LOCAL + 80,
	OPT_P_WORKSPACE,
	OPT_P_DRY_RUN,
	OPT_P_STOP,
	OPT_P_ROLLBACK,
	OPT_P_COMMIT,
	OPT_P_FORMAT,
};

static int usage_patch(FILE *f)
{
	fprintf(f,
		"usage: cae patch [--uuid UUID | --workspace DIR] [options] [FILE|-]\n\n"
		"Applies a patch (a JSON array of commands or Markdown with fenced "
		"blocks; or the `*** Begin Patch` format; or a unified diff) in a prepared "
		"environment, as the apply_patch tool does, and prints the result. FILE defaults "
		"to standard input. The exit status is 0 when every command succeeded, 1 when one "
		"failed or the patch was not applied, 2 for a usage error.\n\noptions:\n"
		"  --uuid UUID        the task (default: $CAE_TASK_UUID, or the only environment)\n"
		"  --workspace DIR    use an existing directory as the workspace (local backend)\n"
		"  --dry-run          check the patch and print the plan; change nothing\n"
		"  --stop-on-error    stop at the first failing command (default: go on)\n"
		"  --rollback         on a failure, restore the workspace as it was before\n"
		"  --auto-commit      commit the changes afterwards (git add -A; git commit)\n"
		"  --format F         json (default: the result object) or text (the ✓/✗ lines)\n"
		"The defaults of the last four come from worker.* in the config "
		"(PICOCLAW_WORKER_*).\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_patch(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"uuid", required_argument, NULL, OPT_P_UUID},
	    {"workspace", required_argument, NULL, OPT_P_WORKSPACE},
	    {"dry-run", no_argument, NULL, OPT_P_DRY_RUN},
	    {"stop-on-error", no_argument, NULL, OPT_P_STOP},
	    {"rollback", no_argument, NULL, OPT_P_ROLLBACK},
	    {"auto-commit", no_argument, NULL, OPT_P_COMMIT},
	    {"format", required_argument, NULL, OPT_P_FORMAT},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0},
	};
	cae_cli_common c = {0};
	const char *uuid = NULL, *workspace = NULL, *format = "json";
	bool dry_run = false, stop = false, rollback = false, commit = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			return usage_patch(stdout);
		case OPT_P_UUID:
			uuid = optarg;
			break;
		case OPT_P_WORKSPACE:
			workspace = optarg;
			break;
		case OPT_P_DRY_RUN:
			dry_run = true;
			break;
		case OPT_P_STOP:
			stop = true;
			break;
		case OPT_P_ROLLBACK:
			rollback = true;
			break;
		case OPT_P_COMMIT:
			commit = true;
			break;
		case OPT_P_FORMAT:
			format = optarg;
			break;
		default:
			if (!cae_cli_common_option(&c, opt, optarg))
				return usage_patch(stderr);
		}
	}
	if (strcmp(format, "json") != 0 && strcmp(format, "text") != 0) {
		fprintf(stderr, "cae: --format must be json or text\n");
		return 2;
	}
	if (argc - optind > 1 || (uuid && workspace))
		return usage_patch(stderr);
	const char *file = optind < argc ? argv[optind] : "-";
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = strcmp(file, "-") == 0
		    ? cae__read_fd(STDIN_FILENO, CAE_PATCH_MAX_INPUT, &text, &len)
		    : cae__read_file(AT_FDCWD, file, CAE_PATCH_MAX_INPUT, &text, &len);
	if (r < 0) {
		fprintf(stderr, "cae: %s: %s\n", file,
			r == -EFBIG ? "patch too large (at most 64 MiB)" : strerror(-r));
		return 2;
	}
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	int status = 1;
	cae_error err;
	cae_error_clear(&err);
	_cleanup_free_ char *id = NULL;
	if (cae_cli_use_environment(s, uuid, workspace, &id) < 0)
		goto out;
	json_t *args = json_pack("{s:s%}", "patch", text, len);
	if (!args) {
		fprintf(stderr, "cae: the patch is not valid UTF-8 text\n");
		status = 2;
		goto out;
	}
	if (dry_run)
		json_object_set_new(args, "dry_run", json_true());
	if (stop)
		json_object_set_new(args, "stop_on_error", json_true());
	if (rollback)
		json_object_set_new(args, "rollback", json_true());
	if (commit)
		json_object_set_new(args, "auto_commit", json_true());
	cae_tool_result res;
	r = cae_session_call_tool(s, "apply_patch", args, NULL, &res, &err);
	json_decref(args);
	if (r < 0) {
		fprintf(stderr, "cae: %s\n", err.message);
		goto out;
	}
	if (strcmp(format, "text") == 0) {
		cae_cli_print_text(res.text);
	} else {
		cae_cli_print_json(res.structured);
	}
	status = !res.is_error && json_is_true(json_object_get(res.structured, "success")) ? 0 : 1;
	cae_tool_result_clear(&res);
out:
	cae_session_free(s);
	return status;
}
