/* cae edit: the text editor tool (view, create, str_replace, insert, undo_edit) from the command
 * line, with the tool's arguments as flags or as one JSON object, and the tool's own
 * result. */
#include "cli/cli.h"

#include "base/fs.h"
#include "base/macro.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

enum {
	OPT_E_UUID = CAE_CLI_OPT_FIRST_LOCAL + 90,
	OPT_E_WORKSPACE,
	OPT_E_PATH,
	OPT_E_FILE_TEXT,
	OPT_E_FILE_TEXT_FROM,
	OPT_E_OLD,
	OPT_E_NEW,
	OPT_E_INSERT_LINE,
	OPT_E_VIEW_RANGE,
	OPT_E_JSON,
	OPT_E_FORMAT,
};

static const char *const commands[] = {"view", "create", "str_replace", "insert", "undo_edit"};

static int usage_edit(FILE *f)
{
	fprintf(
	    f,
	    "usage: cae edit [--uuid UUID | --workspace DIR] COMMAND [PATH] [options]\n"
	    "       cae edit [--uuid UUID | --workspace DIR] --json ARGS|- [options]\n\n"
	    "Runs the text editor in a prepared environment, as the text_editor tool does, and "
	    "prints its result.\nCOMMAND is view, create, str_replace, insert or undo_edit; the "
	    "tool's arguments come as flags\nor as one JSON object (--json, - = stdin; flags "
	    "given beside it override its keys), or\nas a JSON array of such objects, run in "
	    "order in one session (results printed as an array).\nThe undo history lives in "
	    "the process: undo_edit undoes an edit of the same invocation\n(an array), never "
	    "one of an earlier `cae edit`. The exit status is 0 on success, 1 when\nthe editor "
	    "refused (its message is the result; for an array, the first refusal stops it),\n"
	    "2 for a usage error.\n\noptions:\n"
	    "  --uuid UUID          the task (default: $CAE_TASK_UUID, or the only environment)\n"
	    "  --workspace DIR      use an existing directory as the workspace (local backend)\n"
	    "  --path P             the file or directory (or the PATH operand)\n"
	    "  --file-text T        create: the content\n"
	    "  --file-text-from F   create: the content from a file (- = stdin)\n"
	    "  --old-str S          str_replace: the text to replace (exactly once)\n"
	    "  --new-str S          str_replace, insert: the new text\n"
	    "  --insert-line N      insert: after line N (0 = top)\n"
	    "  --view-range A,B     view: lines A to B (B = -1: to the end)\n"
	    "  --json ARGS          the tool's arguments as a JSON object (- = stdin)\n"
	    "  --format F           json (default: the tool's structured result) or text (what "
	    "the model reads)\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

static bool known_command(const char *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(c, commands[i]) == 0)
			return true;
	return false;
}

/* A whole number as the tool takes it; prints why and returns -EINVAL otherwise. */
static int parse_int(const char *flag, const char *s, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno) {
		fprintf(stderr, "cae edit: %s: not a whole number: %s\n", flag, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int set_string(json_t *args, const char *key, const char *value, size_t len)
{
	json_t *v = json_stringn(value, len);
	if (!v) {
		fprintf(stderr, "cae edit: %s is not UTF-8 text\n", key);
		return -EINVAL;
	}
	return json_object_set_new(args, key, v) < 0 ? -ENOMEM : 0;
}

/* One flag into args; < 0 (said why) on a bad value. */
static int add_flag(json_t *args, int opt, const char *arg)
{
	long long a, b;
	switch (opt) {
	case OPT_E_PATH:
		return set_string(args, "path", arg, strlen(arg));
	case OPT_E_FILE_TEXT:
		return set_string(args, "file_text", arg, strlen(arg));
	case OPT_E_FILE_TEXT_FROM: {
		_cleanup_free_ char *text = NULL;
		size_t len = 0;
		int r = strcmp(arg, "-") == 0
			    ? cae__read_fd(STDIN_FILENO, (size_t)1 << 30, &text, &len)
			    : cae__read_file(AT_FDCWD, arg, (size_t)1 << 30, &text, &len);
		if (r < 0) {
			fprintf(stderr, "cae edit: %s: %s\n", arg, strerror(-r));
			return r;
		}
		return set_string(args, "file_text", text ? text : "", len);
	}
	case OPT_E_OLD:
		return set_string(args, "old_str", arg, strlen(arg));
	case OPT_E_NEW:
		return set_string(args, "new_str", arg, strlen(arg));
	case OPT_E_INSERT_LINE:
		if (parse_int("--insert-line", arg, &a) < 0)
			return -EINVAL;
		return json_object_set_new(args, "insert_line", json_integer(a)) < 0 ? -ENOMEM : 0;
	case OPT_E_VIEW_RANGE: {
		const char *comma = strchr(arg, ',');
		if (!comma) {
			fprintf(stderr, "cae edit: --view-range: expected A,B\n");
			return -EINVAL;
		}
		_cleanup_free_ char *first = strndup(arg, (size_t)(comma - arg));
		if (!first)
			return -ENOMEM;
		if (parse_int("--view-range", first, &a) < 0 ||
		    parse_int("--view-range", comma + 1, &b) < 0)
			return -EINVAL;
		return json_object_set_new(args, "view_range", json_pack("[I, I]", a, b)) < 0
			   ? -ENOMEM
			   : 0;
	}
	}
	return -EINVAL;
}

int cae_cli_edit(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"uuid", required_argument, NULL, OPT_E_UUID},
	    {"workspace", required_argument, NULL, OPT_E_WORKSPACE},
	    {"path", required_argument, NULL, OPT_E_PATH},
	    {"file-text", required_argument, NULL, OPT_E_FILE_TEXT},
	    {"file-text-from", required_argument, NULL, OPT_E_FILE_TEXT_FROM},
	    {"old-str", required_argument, NULL, OPT_E_OLD},
	    {"new-str", required_argument, NULL, OPT_E_NEW},
	    {"insert-line", required_argument, NULL, OPT_E_INSERT_LINE},
	    {"view-range", required_argument, NULL, OPT_E_VIEW_RANGE},
	    {"json", required_argument, NULL, OPT_E_JSON},
	    {"format", required_argument, NULL, OPT_E_FORMAT},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0},
	};
	cae_cli_common c = {0};
	const char *uuid = NULL, *workspace = NULL, *json_arg = NULL, *format = "json";
	_cleanup_(json_decrefp) json_t *flags = json_object();
	if (!flags)
		return 1;
	int opt;
	/* operands (COMMAND, PATH) may come before or after the options */
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			return usage_edit(stdout);
		case OPT_E_UUID:
			uuid = optarg;
			break;
		case OPT_E_WORKSPACE:
			workspace = optarg;
			break;
		case OPT_E_JSON:
			json_arg = optarg;
			break;
		case OPT_E_FORMAT:
			format = optarg;
			break;
		default:
			if (opt >= OPT_E_PATH && opt <= OPT_E_VIEW_RANGE) {
				if (add_flag(flags, opt, optarg) < 0)
					return 2;
			} else if (!cae_cli_common_option(&c, opt, optarg)) {
				return usage_edit(stderr);
			}
		}
	}
	if (strcmp(format, "json") != 0 && strcmp(format, "text") != 0) {
		fprintf(stderr, "cae edit: --format must be json or text\n");
		return 2;
	}
	if (uuid && workspace)
		return usage_edit(stderr);
	_cleanup_(json_decrefp) json_t *args = NULL;
	if (json_arg) {
		json_error_t je;
		args = strcmp(json_arg, "-") == 0 ? json_loadf(stdin, 0, &je)
						  : json_loads(json_arg, 0, &je);
		bool ok = json_is_object(args) || (json_is_array(args) && json_array_size(args));
		for (size_t i = 0; ok && json_is_array(args) && i < json_array_size(args); i++)
			ok = json_is_object(json_array_get(args, i));
		if (!ok) {
			fprintf(stderr, "cae edit: --json: %s\n",
				args ? "expected a JSON object or a non-empty array of objects"
				     : je.text);
			return 2;
		}
	} else {
		args = json_object();
		if (!args)
			return 1;
	}
	if (json_is_array(args)) {
		if (optind < argc || json_object_size(flags)) {
			fprintf(stderr, "cae edit: an array of calls takes no COMMAND, PATH or "
					"argument flags\n");
			return 2;
		}
	} else if (optind < argc) {
		if (!known_command(argv[optind])) {
			fprintf(stderr,
				"cae edit: unknown command %s (view, create, str_replace, "
				"insert or undo_edit)\n",
				argv[optind]);
			return 2;
		}
		json_object_set_new(args, "command", json_string(argv[optind++]));
	}
	if (optind < argc) {
		if (json_object_get(flags, "path")) {
			fprintf(stderr, "cae edit: the path is given twice (PATH and --path)\n");
			return 2;
		}
		if (add_flag(flags, OPT_E_PATH, argv[optind++]) < 0)
			return 2;
	}
	if (optind < argc)
		return usage_edit(stderr);
	if (json_is_object(args) && json_object_update(args, flags) < 0)
		return 1;
	if (json_is_object(args) && !json_is_string(json_object_get(args, "command"))) {
		fprintf(stderr, "cae edit: no command (view, create, str_replace, insert or "
				"undo_edit)\n");
		return 2;
	}
	_cleanup_(json_decrefp) json_t *results = json_array();
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	int status = 1;
	cae_error err;
	cae_error_clear(&err);
	_cleanup_free_ char *id = NULL;
	if (cae_cli_use_environment(s, uuid, workspace, &id) < 0)
		goto out;
	bool many = json_is_array(args);
	size_t n = many ? json_array_size(args) : 1;
	if (!results)
		goto out;
	status = 0;
	for (size_t i = 0; i < n && status == 0; i++) {
		cae_tool_result res;
		if (cae_session_call_tool(s, "text_editor", many ? json_array_get(args, i) : args,
					  NULL, &res, &err) < 0) {
			fprintf(stderr, "cae: %s\n", err.message);
			status = 1;
			break;
		}
		if (strcmp(format, "text") == 0) {
			cae_cli_print_text(res.text);
		} else {
			json_array_append(results, res.structured);
		}
		status = res.is_error ? 1 : 0;
		cae_tool_result_clear(&res);
	}
	if (strcmp(format, "json") == 0 && json_array_size(results))
		cae_cli_print_json(many ? results : json_array_get(results, 0));
out:
	cae_session_free(s);
	return status;
}
