/* `cae config show`, driven as a subprocess: the binary's path comes from $CAE_BIN (meson). */
#include "cae/config.h"
#include "base/macro.h"
#include "testutil.h"

#include <fcntl.h>
#include <sys/wait.h>

struct result {
	int status; /* exit status, or 128 + signal */
	char *out;
	char *err;
};

static void result_free(struct result *r)
{
	free(r->out);
	free(r->err);
}

/* Runs cae with args in a fresh directory with only the given environment variables (plus
 * HOME and XDG_CONFIG_HOME pointing into that directory). */
static struct result run_cae(const char *dir, char *const *args, char *const *extra_env)
{
	const char *bin = getenv("CAE_BIN");
	ck_assert_msg(bin && *bin, "CAE_BIN is not set");
	char home[4200], xdg[4200];
	snprintf(home, sizeof(home), "HOME=%s", dir);
	snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s/xdg", dir);
	char *envp[32] = {home, xdg, (char *)"PATH=/usr/bin:/bin"};
	size_t ne = 3;
	for (size_t i = 0; extra_env && extra_env[i] && ne < 31; i++)
		envp[ne++] = extra_env[i];
	envp[ne] = NULL;
	char *argv[32] = {(char *)bin};
	size_t na = 1;
	for (size_t i = 0; args[i] && na < 31; i++)
		argv[na++] = args[i];
	argv[na] = NULL;

	_cleanup_free_ char *outp = cae__path_join(dir, ".stdout");
	_cleanup_free_ char *errp = cae__path_join(dir, ".stderr");
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (o < 0 || e < 0 || chdir(dir) < 0)
			_exit(99);
		dup2(o, 1);
		dup2(e, 2);
		execve(bin, argv, envp);
		_exit(98);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	struct result r = {.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)};
	size_t len;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, outp, 16 << 20, &r.out, &len), 0);
	ck_assert_int_eq(cae__read_file(AT_FDCWD, errp, 16 << 20, &r.err, &len), 0);
	return r;
}

#define ARGS(...) ((char *const[]){__VA_ARGS__, NULL})

static json_t *get_path(json_t *j, const char *a, const char *b, const char *c)
{
	j = json_object_get(j, a);
	if (b)
		j = json_object_get(j, b);
	if (c)
		j = json_object_get(j, c);
	return j;
}

START_TEST(show_effective_config)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	tu_write(d, "my.yaml",
		 "command_executor:\n  execution: {timeout_seconds: 77}\n"
		 "gitlab: {token: glpat-from-file, api_url: \"https://u:pw@gl.local/api\"}\n");
	char cfgenv[4200];
	snprintf(cfgenv, sizeof(cfgenv), "CAE_CONFIG=%s/my.yaml", d);
	struct result r =
	    run_cae(d, ARGS((char *)"config", (char *)"show"),
		    ARGS(cfgenv, (char *)"GITHUB_PERSONAL_ACCESS_TOKEN=ghp_from_env_123",
			 (char *)"PICOCLAW_WORKER_GIT_TIMEOUT=9"));
	ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
	json_error_t je;
	json_t *j = json_loads(r.out, 0, &je);
	ck_assert_msg(j != NULL, "stdout is not JSON: %s", je.text);
	ck_assert_int_eq(
	    json_integer_value(get_path(j, "command_executor", "execution", "timeout_seconds")),
	    77);
	ck_assert_int_eq(json_integer_value(get_path(j, "worker", "git_timeout", NULL)), 9);
	ck_assert_str_eq(json_string_value(get_path(j, "github", "token", NULL)), "***");
	ck_assert_str_eq(json_string_value(get_path(j, "gitlab", "token", NULL)), "***");
	ck_assert_str_eq(json_string_value(get_path(j, "gitlab", "api_url", NULL)),
			 "https://***@gl.local/api");
	ck_assert(strstr(r.out, "ghp_from_env_123") == NULL);
	ck_assert(strstr(r.out, "glpat-from-file") == NULL);
	ck_assert(strstr(r.out, "pw@") == NULL);
	ck_assert(strstr(r.err, "ghp_from_env_123") == NULL);

	/* what it prints loads as a config giving the same output */
	static char *const no_env[] = {NULL};
	cae_config *again = NULL;
	cae_error err = {0};
	ck_assert_int_eq(
	    cae_config_load_string(&again, r.out, strlen(r.out), "out.json", no_env, &err), 0);
	json_t *j2 = cae_config_to_json(again, true);
	ck_assert(json_equal(j, j2));
	json_decref(j2);
	cae_config_free(again);
	json_decref(j);
	result_free(&r);

	/* --config wins over CAE_CONFIG; --backend is applied */
	tu_write(d, "other.yaml", "command_executor:\n  execution: {timeout_seconds: 88}\n");
	r = run_cae(d,
		    ARGS((char *)"config", (char *)"show", (char *)"--config", (char *)"other.yaml",
			 (char *)"--backend", (char *)"local"),
		    ARGS(cfgenv));
	ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
	j = json_loads(r.out, 0, &je);
	ck_assert_int_eq(
	    json_integer_value(get_path(j, "command_executor", "execution", "timeout_seconds")),
	    88);
	ck_assert_str_eq(json_string_value(get_path(j, "command_executor", "backend", NULL)),
			 "local");
	json_decref(j);
	result_free(&r);
	cae__rm_rf(d);
}
END_TEST

START_TEST(bad_config_exits_2)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	tu_write(d, "config.yaml", "command_executor:\n  execution:\n    timeout_seconds: abc\n");
	/* ./config.yaml is found by the default lookup */
	struct result r = run_cae(d, ARGS((char *)"config", (char *)"show"), NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_str_eq(r.out, "");
	ck_assert_msg(strstr(r.err, "config.yaml:3: command_executor.execution.timeout_seconds: "
				    "expected a positive integer, got \\\"abc\\\"") ||
			  strstr(r.err,
				 "config.yaml:3: command_executor.execution.timeout_seconds: "
				 "expected a positive integer, got \"abc\""),
		      "stderr: %s", r.err);
	result_free(&r);

	r = run_cae(d,
		    ARGS((char *)"config", (char *)"show", (char *)"--config", (char *)"nope.yaml"),
		    NULL);
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "nope.yaml: config file not found") != NULL, "stderr: %s",
		      r.err);
	result_free(&r);

	tu_write(d, "config.yaml", "worker: {}\n");
	r = run_cae(d, ARGS((char *)"config", (char *)"show"),
		    ARGS((char *)"EXECUTOR_TIMEOUT=soon"));
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "EXECUTOR_TIMEOUT") != NULL, "stderr: %s", r.err);
	result_free(&r);
	cae__rm_rf(d);
}
END_TEST

START_TEST(warnings_help_usage)
{
	_cleanup_free_ char *d = tu_mkdtemp();
	tu_write(d, "config.yaml", "command_executor:\n  enabeld: true\n");
	struct result r = run_cae(d, ARGS((char *)"config", (char *)"show"), NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.err, "config.yaml:2: unknown key") != NULL, "stderr: %s", r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "\"command_executor\""));
	result_free(&r);

	r = run_cae(d, ARGS((char *)"config", (char *)"show", (char *)"--help"), NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "usage: cae config show"));
	result_free(&r);
	r = run_cae(d, ARGS((char *)"config", (char *)"--help"), NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "usage: cae config show"));
	result_free(&r);
	r = run_cae(d, ARGS((char *)"config", (char *)"frobnicate"), NULL);
	ck_assert_int_eq(r.status, 2);
	result_free(&r);
	r = run_cae(d, ARGS((char *)"config", (char *)"show", (char *)"--bogus"), NULL);
	ck_assert_int_eq(r.status, 2);
	result_free(&r);
	r = run_cae(d, ARGS((char *)"config", (char *)"show", (char *)"extra"), NULL);
	ck_assert_int_eq(r.status, 2);
	result_free(&r);
	cae__rm_rf(d);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("config-cli");
	TCase *tc = tcase_create("config-cli");
	tcase_add_test(tc, show_effective_config);
	tcase_add_test(tc, bad_config_exits_2);
	tcase_add_test(tc, warnings_help_usage);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
