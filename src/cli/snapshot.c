/* cae snapshot | restore | fork: snapshots of an environment, putting one back, and a new
 * environment from an environment or a snapshot (include/cae/snapshot.h). */
#include "cli/cli.h"

#include "cae/snapshot.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

enum { OPT_NAME = OPT_LAST_SHARED, OPT_FROM, OPT_SNAPSHOT };

static int usage_snapshot(FILE *f)
{
	fprintf(f,
		"usage: cae snapshot UUID [--name N] [options]\n"
		"       cae snapshot list [UUID] [options]\n"
		"       cae snapshot rm UUID SNAPSHOT [options]\n\n"
		"Records the files of UUID's environment (the whole workspace: tracked, untracked "
		"and ignored files, .git, modes, links; not processes) and prints the snapshot "
		"({id, name, bytes, mechanism: reflink|copy, ...}). list prints the snapshots of "
		"one environment or of every one; rm removes one. Local backend.\n\noptions:\n"
		"  --name N           a name to restore it by (unique in the "
		"environment)\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

static int finish(cae_session *s, const char *what, int r, json_t *j, const cae_error *err)
{
	if (r == 0)
		cae_cli_print_json(j);
	else
		cae_cli_error(what, err);
	json_decref(j);
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}

int cae_cli_snapshot(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"name", required_argument, NULL, OPT_NAME}, CAE_CLI_COMMON_LONGOPTS, {0, 0, 0, 0}};
	cae_cli_common c = {0};
	const char *name = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_snapshot(stdout);
		if (opt == OPT_NAME)
			name = optarg;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_snapshot(stderr);
	}
	int rest = argc - optind;
	char **a = argv + optind;
	bool list = rest >= 1 && strcmp(a[0], "list") == 0;
	bool rm = rest >= 1 && strcmp(a[0], "rm") == 0;
	if ((list && rest > 2) || (rm && rest != 3) || (!list && !rm && rest != 1) ||
	    ((list || rm) && name))
		return usage_snapshot(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_backend *b = cae_session_backend(s);
	cae_error err;
	cae_error_clear(&err);
	json_t *j = NULL;
	int r;
	if (list) {
		r = cae_snapshot_list(b, rest == 2 ? a[1] : NULL, &j, &err);
	} else if (rm) {
		r = cae_snapshot_remove(b, a[1], a[2], &err);
		j = r == 0 ? json_pack("{s:s, s:s, s:b}", "task_uuid", a[1], "snapshot", a[2],
				       "removed", true)
			   : NULL;
	} else {
		r = cae_snapshot_create(b, a[0], name, &j, &err);
	}
	return finish(s, "snapshot", r, j, &err);
}

static int usage_restore(FILE *f)
{
	fprintf(f,
		"usage: cae restore UUID SNAPSHOT [options]\n\n"
		"Puts UUID's environment back as the snapshot (an id or a name) recorded it: files "
		"added since are gone, changed ones as they were. This process's sandbox of it is "
		"stopped first; an environment where another process runs commands is refused "
		"(end them first).\n\noptions:\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_restore(int argc, char **argv)
{
	static const struct option longopts[] = {CAE_CLI_COMMON_LONGOPTS, {0, 0, 0, 0}};
	cae_cli_common c = {0};
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_restore(stdout);
		if (!cae_cli_common_option(&c, opt, optarg))
			return usage_restore(stderr);
	}
	if (argc - optind != 2)
		return usage_restore(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_error err;
	cae_error_clear(&err);
	json_t *j = NULL;
	int r =
	    cae_snapshot_restore(cae_session_backend(s), argv[optind], argv[optind + 1], &j, &err);
	return finish(s, "restore", r, j, &err);
}

static int usage_fork(FILE *f)
{
	fprintf(
	    f,
	    "usage: cae fork (--from UUID [--snapshot S] | --snapshot ID) --uuid NEW [options]\n\n"
	    "Makes a new environment NEW from UUID's environment as it is now, or from one of "
	    "its snapshots (with --snapshot alone: a snapshot id of any environment), and "
	    "prints its ContainerInfo with forked_from and mechanism (reflink|copy). It has "
	    "its own workspace, sandbox and limits: nothing writable is shared.\n\noptions:\n"
	    "  --from UUID        the environment to fork\n"
	    "  --snapshot S       a snapshot (id or name) to start from\n"
	    "  --uuid NEW         the new environment's task uuid\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_fork(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"from", required_argument, NULL, OPT_FROM},
	    {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
	    {"uuid", required_argument, NULL, OPT_UUID},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	cae_cli_common c = {0};
	const char *from = NULL, *snap = NULL, *uuid = NULL;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_fork(stdout);
		if (opt == OPT_FROM)
			from = optarg;
		else if (opt == OPT_SNAPSHOT)
			snap = optarg;
		else if (opt == OPT_UUID)
			uuid = optarg;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_fork(stderr);
	}
	if (optind < argc || !uuid || (!from && !snap))
		return usage_fork(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_error err;
	cae_error_clear(&err);
	json_t *j = NULL;
	cae_env_info info;
	int r = cae_snapshot_fork(cae_session_backend(s), from, snap, uuid, &info, &j, &err);
	if (r == 0)
		cae_env_info_clear(&info);
	return finish(s, "fork", r, j, &err);
}
