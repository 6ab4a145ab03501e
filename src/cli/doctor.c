/* cae doctor: what works on this host, per backend, and what to do about the rest
 * (cae/doctor.h). Text by default, --format json for the report as it is. Exit 0 when the
 * default backend works, 1 when it does not, 2 for a usage error or a bad config. */
#include "cli/cli.h"

#include "cae/doctor.h"

#include <stdio.h>
#include <string.h>

#include "base/banned.h"

enum { OPT_FORMAT = CAE_CLI_OPT_FIRST_LOCAL };

static void doctor_usage(FILE *f)
{
	fprintf(f,
		"usage: cae doctor [--format text|json] [options]\n"
		"\n"
		"Checks, for each backend (local, docker, kubernetes), what works on this host\n"
		"and says what to do about the rest: bubblewrap, user namespaces, the sandbox,\n"
		"seccomp, cgroups, the disk bound, the state directory; the Docker engine, its\n"
		"version and storage driver, each environment's image; the cluster, its\n"
		"namespace and whether its nodes have the images. Only looks: GET requests to\n"
		"the engine and the cluster, nothing made that cae would not make on first use.\n"
		"\n"
		"--format json prints {default_backend, configured_backend, ok, backends:\n"
		"{NAME: {ok, checks: [{name, ok, detail, fix, required}]}}}.\n"
		"Exit status: 0 when the default backend (--backend, else\n"
		"command_executor.backend; auto resolved) works, 1 when it does not, 2 for a\n"
		"usage error or a bad config.\n"
		"\n"
		"options:\n"
		"  --format F         text (default) or json\n" CAE_CLI_COMMON_HELP);
}

static void print_text(json_t *report)
{
	const char *def = json_string_value(json_object_get(report, "default_backend"));
	const char *conf = json_string_value(json_object_get(report, "configured_backend"));
	bool ok = json_is_true(json_object_get(report, "ok"));
	printf("default backend: %s%s%s%s — %s\n", def, strcmp(def, conf) ? " (" : "",
	       strcmp(def, conf) ? conf : "", strcmp(def, conf) ? ")" : "",
	       ok ? "works" : "does NOT work");
	const char *key;
	json_t *b;
	json_object_foreach(json_object_get(report, "backends"), key, b)
	{
		printf("\n%s: %s\n", key,
		       json_is_true(json_object_get(b, "ok")) ? "works" : "does not work");
		size_t i;
		json_t *c;
		json_array_foreach(json_object_get(b, "checks"), i, c)
		{
			bool cok = json_is_true(json_object_get(c, "ok"));
			bool req = json_is_true(json_object_get(c, "required"));
			printf("  %-5s %-20s %s\n",
			       cok   ? "ok"
			       : req ? "FAIL"
				     : "warn",
			       json_string_value(json_object_get(c, "name")),
			       json_string_value(json_object_get(c, "detail")));
			const char *fix = json_string_value(json_object_get(c, "fix"));
			if (!cok && fix)
				printf("  %-5s %-20s fix: %s\n", "", "", fix);
		}
	}
}

int cae_cli_doctor(int argc, char **argv)
{
	static const struct option longopts[] = {CAE_CLI_COMMON_LONGOPTS,
						 {"format", required_argument, NULL, OPT_FORMAT},
						 {NULL, 0, NULL, 0}};
	cae_cli_common common = {0};
	const char *format = "text";
	int opt;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		if (cae_cli_common_option(&common, opt, optarg))
			continue;
		if (opt == OPT_FORMAT) {
			format = optarg;
			continue;
		}
		if (opt == 'h') {
			doctor_usage(stdout);
			return 0;
		}
		doctor_usage(stderr);
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "cae doctor: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (strcmp(format, "text") != 0 && strcmp(format, "json") != 0) {
		fprintf(stderr, "cae doctor: --format: text or json, not '%s'\n", format);
		return 2;
	}
	cae_config *cfg = NULL;
	if (cae_cli_load_config(&common, &cfg) < 0)
		return 2;
	json_t *report = cae_doctor_run(cfg, NULL);
	int status = 1;
	if (!report) {
		fprintf(stderr, "cae doctor: out of memory\n");
	} else {
		if (strcmp(format, "json") == 0)
			cae_cli_print_json(report);
		else
			print_text(report);
		status = json_is_true(json_object_get(report, "ok")) ? 0 : 1;
	}
	json_decref(report);
	cae_config_free(cfg);
	return status;
}
