/* Shared by the subcommands: the logger, config + session opening, JSON output. */
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

static cae_log *cli_log;

cae_log *cae_cli_log(void)
{
	if (!cli_log) {
		cae_log_level lvl = CAE_LOG_WARN;
		const char *e = getenv("CAE_LOG_LEVEL");
		if (e && *e && cae_log_level_parse(e, &lvl) < 0)
			fprintf(stderr, "cae: CAE_LOG_LEVEL: unknown level \"%s\" (ignored)\n", e);
		cli_log = cae_log_new(STDERR_FILENO, lvl);
	}
	return cli_log;
}

void cae_cli_log_free(void)
{
	cae_log_free(cli_log);
	cli_log = NULL;
}

int cae_cli_common_option(cae_cli_common *c, int opt, const char *arg)
{
	switch (opt) {
	case CAE_CLI_OPT_CONFIG:
		c->config = arg;
		return 1;
	case CAE_CLI_OPT_BACKEND:
		c->backend = arg;
		return 1;
	case CAE_CLI_OPT_STATE_DIR:
		c->state_dir = arg;
		return 1;
	default:
		return 0;
	}
}

int cae_cli_load_config(const cae_cli_common *c, cae_config **out)
{
	cae_error err;
	cae_error_clear(&err);
	cae_config *cfg = NULL;
	int r = cae_config_load(&cfg, c ? c->config : NULL, NULL, &err);
	if (r < 0) {
		fprintf(stderr, "cae: %s\n", err.message);
		return r;
	}
	if (c && c->backend &&
	    (r = cae_config_set(cfg, "command_executor.backend", c->backend, &err)) < 0) {
		fprintf(stderr, "cae: --backend: %s\n", err.message);
		cae_config_free(cfg);
		return r;
	}
	if (c && c->state_dir &&
	    (r = cae_config_set(cfg, "command_executor.state_dir", c->state_dir, &err)) < 0) {
		fprintf(stderr, "cae: --state-dir: %s\n", err.message);
		cae_config_free(cfg);
		return r;
	}
	for (size_t i = 0; i < cfg->warnings.n; i++)
		cae_log_event(cae_cli_log(), CAE_LOG_WARN, "config.warning", "%s",
			      cfg->warnings.items[i]);
	*out = cfg;
	return 0;
}

int cae_cli_open(const cae_cli_common *c, cae_session **out)
{
	cae_config *cfg;
	int r = cae_cli_load_config(c, &cfg);
	if (r < 0)
		return r;
	cae_error err;
	cae_error_clear(&err);
	r = cae_session_new(cfg, cae_cli_log(), out, &err);
	if (r < 0)
		fprintf(stderr, "cae: %s\n", err.message);
	return r;
}

json_t *cae_cli_read_json(const char *path, cae_error *err)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = strcmp(path, "-") == 0 ? cae__read_fd(STDIN_FILENO, 16u << 20, &text, &len)
				       : cae__read_file(AT_FDCWD, path, 16u << 20, &text, &len);
	if (r < 0) {
		cae_error_set(err, r, "%s: %s", path, strerror(-r));
		return NULL;
	}
	json_error_t je;
	json_t *j = json_loadb(text, len, 0, &je);
	if (!j)
		cae_error_set(err, -EINVAL, "%s:%d:%d: %s", path, je.line, je.column, je.text);
	return j;
}

void cae_cli_print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2));
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		free(s);
	}
	fflush(stdout);
}

int cae_cli_pick_uuid(cae_session *s, const char *given, const char *hint, char **out)
{
	const char *env = getenv("CAE_TASK_UUID");
	if (given || (env && *env)) {
		*out = strdup(given ? given : env);
		return *out ? 0 : -ENOMEM;
	}
	json_t *list = NULL;
	cae_error err;
	if (cae_backend_list(cae_session_backend(s), &list, &err) < 0) {
		cae_cli_error(NULL, &err);
		return -EIO;
	}
	size_t n = json_array_size(list);
	if (n != 1) {
		fprintf(stderr, "cae: %s: %s\n",
			n == 0 ? "NOT_FOUND: no environment exists (cae prepare first)"
			       : "INVALID_ARGUMENT: several environments exist",
			hint);
		json_decref(list);
		return -EINVAL;
	}
	*out = strdup(json_string_value(json_object_get(json_array_get(list, 0), "task_uuid")));
	json_decref(list);
	return *out ? 0 : -ENOMEM;
}

void cae_cli_error(const char *what, const cae_error *err)
{
	fprintf(stderr, "cae: %s%s%s: %s\n", what ? what : "", what ? ": " : "",
		cae_error_kind(err->code), err->message);
}

void cae_cli_print_text(const char *text)
{
	fputs(text ? text : "", stdout);
	if (text && *text && text[strlen(text) - 1] != '\n')
		fputc('\n', stdout);
	fflush(stdout);
}

int cae_cli_use_environment(cae_session *s, const char *uuid, const char *workspace, char **id)
{
	cae_error err;
	cae_error_clear(&err);
	if (workspace) {
		if (cae_session_use_workspace(s, workspace, &err) < 0) {
			cae_cli_error(NULL, &err);
			return -1;
		}
		return 0;
	}
	if (cae_cli_pick_uuid(s, uuid, "give --uuid UUID or --workspace DIR", id) < 0)
		return -1;
	if (cae_session_set_current(s, *id, &err) < 0) {
		cae_cli_error(NULL, &err);
		return -1;
	}
	return 0;
}
