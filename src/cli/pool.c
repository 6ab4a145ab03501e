/* cae pool fill | status | drain: the warm pool of the docker or kubernetes backend
 * (command_executor.pool) from the command line. `cae mcp` keeps the pool filled by itself (its
 * collector thread); these are for a pool without a long-lived process, and for an operator's look.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

enum { OPT_ALL = OPT_LAST_SHARED };

static int usage_pool(FILE *f)
{
	fprintf(
	    f, "usage: cae pool (fill | status | drain [--all]) [options]\n\n"
	       "The warm pool (command_executor.pool; docker or kubernetes backend): containers "
	       "or pods started ahead for each pooled environment, claimed by prepares whose "
	       "container or pod would be the same.\n\n"
	       "  fill    remove this configuration's pool containers past their maximum age or "
	       "not running, start new ones until each pooled environment has "
	       "command_executor.pool.size, print {created}\n"
	       "  status  print this instance's pool containers (JSON array: name, "
	       "environment, key, age_s, max_age_s, state, expired, this_config, instance)\n"
	       "  drain   remove this configuration's pool containers (--all: of every "
	       "configuration of this instance), print {removed}\n\noptions:\n"
	       "  --all              drain: every pool container of this instance\n"
	       "  --all-instances    status, drain: every cae instance's pool containers, not only "
	       "this one's (command_executor.instance)\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_pool(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"all", no_argument, NULL, OPT_ALL},
	    {"all-instances", no_argument, NULL, OPT_ALL_INSTANCES},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	cae_cli_common c = {0};
	bool all = false, all_instances = false;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_pool(stdout);
		if (opt == OPT_ALL)
			all = true;
		else if (opt == OPT_ALL_INSTANCES)
			all_instances = true;
		else if (!cae_cli_common_option(&c, opt, optarg))
			return usage_pool(stderr);
	}
	if (optind + 1 != argc)
		return usage_pool(stderr);
	const char *verb = argv[optind];
	if (strcmp(verb, "fill") != 0 && strcmp(verb, "status") != 0 && strcmp(verb, "drain") != 0)
		return usage_pool(stderr);
	if ((all && strcmp(verb, "drain") != 0) || (all_instances && strcmp(verb, "fill") == 0))
		return usage_pool(stderr);
	cae_session *s;
	if (cae_cli_open(&c, &s) < 0)
		return 1;
	cae_backend *b = cae_session_backend(s);
	cae_backend_set_all_instances(b, all_instances);
	cae_error err;
	cae_error_clear(&err);
	json_t *out = NULL;
	int n = 0, r;
	if (strcmp(verb, "status") == 0) {
		r = cae_backend_pool_status(b, &out, &err);
	} else if (strcmp(verb, "fill") == 0) {
		r = cae_backend_pool_fill(b, -1, &n, &err);
		out = json_pack("{s:i}", "created", n);
	} else {
		r = cae_backend_pool_drain(b, all, &n, &err);
		out = json_pack("{s:i}", "removed", n);
	}
	if (r < 0 && out && json_is_object(out))
		json_object_set_new(out, "error", json_string(err.message));
	if (out)
		cae_cli_print_json(out);
	if (r < 0)
		fprintf(stderr, "cae: pool %s: %s\n", verb, err.message);
	json_decref(out);
	cae_session_free(s);
	return r == 0 ? 0 : 1;
}
