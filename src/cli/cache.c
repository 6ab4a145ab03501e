/* cae cache prune: removes the host's mirrors of remote repositories (src/backend/mirror.c)
 * that no task used for longer than command_executor.clone.mirror_cache.max_age_hours, or
 * all of them; a mirror a clone is reading is left alone. Then this instance's package caches
 * (src/backend/pkgcache.h) unused for longer than command_executor.package_cache.max_age_hours
 * and, least recently used first, those beyond package_cache.max_size. */
#include "cli/cli.h"

#include "backend/backend-internal.h"
#include "backend/pkgcache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

enum { OPT_ALL = CAE_CLI_OPT_FIRST_LOCAL, OPT_AGE };

static int usage_cache(FILE *f)
{
	fprintf(f, "usage: cae cache prune [--all | --older-than-hours H] [options]\n\nRemoves the "
		   "mirrors of remote repositories (<state_dir>/mirrors/) that no clone used for "
		   "longer than H hours (default: "
		   "command_executor.clone.mirror_cache.max_age_hours), or every one with --all, "
		   "each under its lock (one in use is kept); then this instance's package caches "
		   "(<state_dir>/package-cache/) unused for longer than H hours (default: "
		   "command_executor.package_cache.max_age_hours) and, least recently used "
		   "first, those beyond package_cache.max_size, or every one with --all; prints "
		   "what it removed.\n\n"
		   "options:\n"
		   "  --all                 every mirror not in use\n"
		   "  --older-than-hours H  unused for longer than H hours\n" CAE_CLI_COMMON_HELP);
	return f == stdout ? 0 : 2;
}

int cae_cli_cache(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"all", no_argument, NULL, OPT_ALL},
	    {"older-than-hours", required_argument, NULL, OPT_AGE},
	    CAE_CLI_COMMON_LONGOPTS,
	    {0, 0, 0, 0}};
	if (argc < 2 || strcmp(argv[1], "prune") != 0) {
		if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))
			return usage_cache(stdout);
		return usage_cache(stderr);
	}
	argc--;
	argv++;
	cae_cli_common c = {0};
	bool all = false;
	double hours = -1;
	int opt;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (opt == 'h')
			return usage_cache(stdout);
		if (opt == OPT_ALL) {
			all = true;
		} else if (opt == OPT_AGE) {
			char *end;
			hours = strtod(optarg, &end);
			if (*end || hours < 0)
				return usage_cache(stderr);
		} else if (!cae_cli_common_option(&c, opt, optarg)) {
			return usage_cache(stderr);
		}
	}
	if (optind < argc)
		return usage_cache(stderr);
	cae_config *cfg;
	if (cae_cli_load_config(&c, &cfg) < 0)
		return 1;
	double pkg_hours = hours >= 0 ? hours : cfg->command_executor.package_cache.max_age_hours;
	if (hours < 0)
		hours = cfg->command_executor.clone.mirror_cache.max_age_hours;
	json_t *removed = json_array();
	int count = 0;
	cae_error err;
	cae_error_clear(&err);
	int r = removed
		    ? cae__mirror_prune(cfg, (int64_t)(hours * 3600), all, removed, &count, &err)
		    : cae_error_set(&err, -ENOMEM, "out of memory");
	size_t i;
	json_t *m;
	json_array_foreach(removed, i, m)
	{
		const char *url = json_string_value(json_object_get(m, "url"));
		printf("removed %s %s\n", json_string_value(json_object_get(m, "key")),
		       url ? url : "(incomplete)");
	}
	printf("removed %d mirror%s\n", count, count == 1 ? "" : "s");
	json_decref(removed);
	if (r >= 0) {
		removed = json_array();
		r = removed ? cae__pkgcache_prune(cfg, (int64_t)(pkg_hours * 3600),
						  cfg->command_executor.package_cache.max_bytes,
						  all, false, removed, &count, &err)
			    : cae_error_set(&err, -ENOMEM, "out of memory");
		json_array_foreach(removed, i, m)
		{
			printf("removed %s (%lld bytes)\n",
			       json_string_value(json_object_get(m, "cache")),
			       (long long)json_integer_value(json_object_get(m, "bytes")));
		}
		if (r >= 0)
			printf("removed %d package cache%s\n", count, count == 1 ? "" : "s");
		json_decref(removed);
	}
	cae_config_free(cfg);
	if (r < 0) {
		fprintf(stderr, "cae: cache prune: %s\n", err.message);
		return 1;
	}
	return 0;
}
