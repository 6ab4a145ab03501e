/* Tests of the docker backend's warm pool (src/backend/pool.c) against a real engine: a
 * claimed container is the task's as a cold one would be (ContainerInfo, list, push
 * credentials, no token), two processes claiming from a pool of one get it once, a pool
 * container past its maximum age is never handed out, the collector refills after a
 * claim, drain touches only its own configuration's pool, and another instance with the
 * same configuration has another pool: it neither lists, drains nor collects this one's. Every
 * test's configuration has a pids limit of its own (runner pid and a sequence number), so its pool
 * key is its own: no other run's pool container is ever claimed or removed here. The process that
 * filled the pool claims through the helper stream it kept, that stream is closed once another
 * process claimed the container, the filler racing another process gets it once, and a
 * filler killed (SIGKILL) leaves no stream behind and its container still serves a task. */
#include "backend-test.h"
#include "dockertest.h"

#include "backend/backend-internal.h"
#include "base/timeutil.h"
#include "cae/docker.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

static int cfg_seq;

/* The docker backend on the host network with a pool of size for python, and a pids limit
 * (so a pool key) no other test run has. */
static cae_config *pcfg(const char *size, const char *max_age)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	char pids[32];
	snprintf(pids, sizeof(pids), "%d", 2000 + (bt_runner_pid % 100000) * 8 + cfg_seq);
	bt_docker_configure(cfg, pids);
	bt_pool_configure(cfg, size, max_age);
	return cfg;
}

static cae_backend *pbackend(const cae_config *cfg)
{
	return bt_backend("docker", cfg, NULL);
}

static void drain(cae_backend *b)
{
	int n = 0;
	cae_error err = {0};
	ck_assert_msg(cae_backend_pool_drain(b, false, &n, &err) == 0, "%s", err.message);
}

START_TEST(pool_config_rules)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	/* no pool by default: nothing is wanted, nothing claimed */
	ck_assert_int_eq(cfg->command_executor.pool.size, 0);
	ck_assert(!cae__pool_wanted(cfg, "python"));
	bt_cfg_set(cfg, "command_executor.pool.max_age_seconds", "600");
	bt_cfg_set(cfg, "command_executor.pool.size", "2");
	ck_assert(cae__pool_wanted(cfg, "python")); /* the default environment */
	ck_assert(!cae__pool_wanted(cfg, "node"));
	bt_cfg_set(cfg, "command_executor.pool.environments", "node,go");
	ck_assert(cae__pool_wanted(cfg, "node"));
	ck_assert(!cae__pool_wanted(cfg, "python"));
	/* an environment that is not configured; an age the helper's lifetime would cut */
	ck_assert_int_lt(cae_config_set(cfg, "command_executor.pool.environments", "nope", &err),
			 0);
	ck_assert_ptr_nonnull(strstr(err.message, "not a configured environment"));
	ck_assert_int_lt(cae_config_set(cfg, "command_executor.pool.max_age_seconds", "3600", &err),
			 0);
	ck_assert_ptr_nonnull(strstr(err.message, "helper_lifetime_seconds"));
	ck_assert_int_lt(cae_config_set(cfg, "command_executor.pool.size", "65", &err), 0);
	ck_assert_int_lt(cae_config_set(cfg, "command_executor.pool.max_age_seconds", "0", &err),
			 0);
	cae_config_free(cfg);
	/* the local backend has no pool */
	cfg = cae_config_defaults(NULL);
	cae_backend *b = NULL;
	ck_assert_int_eq(cae_backend_new_named("local", cfg, NULL, &b, &err), 0);
	int n = 0;
	ck_assert_int_eq(cae_backend_pool_fill(b, -1, &n, &err), -EOPNOTSUPP);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A warm prepare hands out the pool's container, and the result is the task's as a cold
 * prepare's: its ContainerInfo from any process, its files, its push credentials (asked
 * of the claim's record, never a token in the container's spec), and under network none the
 * forge rule (the claim's record too: the pool container has no forge label), so that a push
 * from another process reaches the loopback forge through the proxy. */
START_TEST(warm_prepare_is_the_tasks)
{
	cfg_seq = 1;
	cae_config *cfg = pcfg("1", "600");
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "none");
	bt_cfg_set(cfg, "command_executor.docker.network.allowed_addresses", "127.0.0.1/32");
	cae_backend *b = pbackend(cfg);
	cae_docker *d = client();
	char pool_id[128], pool_name[160], pool_created[64];
	bt_pool_filled(b, pool_id, sizeof(pool_id), pool_name, sizeof(pool_name));
	ck_assert_int_eq(bt_fill(b), 0); /* full */
	json_t *mine = bt_own_pool(b);
	snprintf(pool_created, sizeof(pool_created), "%s",
		 json_string_value(json_object_get(json_array_get(mine, 0), "created_at")));
	json_decref(mine);
	/* the pool's container carries no task and no token */
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, pool_id, &c, &err), 0);
	char *text = json_dumps(c, 0);
	ck_assert_ptr_null(strstr(text, git_token));
	ck_assert_ptr_null(strstr(text, "cae.task_uuid"));
	ck_assert_ptr_null(strstr(text, "cae.git_credential"));
	free(text);
	json_decref(c);

	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, pool_id);
	ck_assert_str_eq(info.status, "ready");
	ck_assert_str_eq(info.created_at, pool_created);
	/* the pool name is gone; the task's name is the container */
	ck_assert_int_eq(cae_docker_container_inspect(d, pool_name, &c, NULL), -ENOENT);
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	ck_assert_str_eq(json_string_value(json_object_get(c, "Id")), pool_id);
	json_decref(c);
	/* another process's view: info and list as for any environment */
	cae_backend *b2 = pbackend(cfg);
	cae_env_info i2;
	ck_assert_msg(cae_backend_info(b2, uuid, &i2, &err) == 0, "%s", err.message);
	ck_assert_str_eq(i2.task_uuid, uuid);
	ck_assert_str_eq(i2.status, "ready");
	ck_assert_str_eq(i2.environment_name, "python");
	ck_assert_str_eq(i2.created_at, info.created_at);
	ck_assert_str_eq(i2.container_id, pool_id);
	ck_assert_int_eq(json_array_size(i2.warnings), json_array_size(info.warnings));
	cae_env_info_clear(&i2);
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b2, &list, &err), 0);
	bool listed = false;
	size_t k;
	json_t *e;
	json_array_foreach(list, k, e)
	{
		const char *u = json_string_value(json_object_get(e, "task_uuid"));
		if (u && strcmp(u, uuid) == 0)
			listed =
			    strcmp(json_string_value(json_object_get(e, "status")), "ready") == 0;
	}
	ck_assert(listed);
	json_decref(list);
	/* the clone is there; the claim's record is root's: the user cannot change it */
	cae_run_result r = bt_exec(b2, uuid,
				   "test -f /workspace/project/.git/HEAD && id -u && "
				   "(rm -rf /.cae-claim 2>/dev/null || true) && "
				   "(echo x > /.cae-claim/git_credential) 2>/dev/null; "
				   "test -d /.cae-claim && echo kept",
				   120000);
	ck_assert_msg(strcmp(r.out, "1000\nkept\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* a push asks for the token (from another process): the target the claim recorded; it
	 * reaches the forge through the proxy, the forge the claim recorded (the loopback test
	 * forge is in NO_PROXY, which names the environment's own loopback: not for this push) */
	char script[512];
	snprintf(script, sizeof(script),
		 "env -u NO_PROXY -u no_proxy git push -q origin HEAD:refs/heads/pool-%s 2>&1 && "
		 "echo pushed",
		 uuid);
	r = bt_exec(b2, uuid, script, 120000);
	ck_assert_msg(strcmp(r.out, "pushed\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_docker_container_inspect(d, pool_id, &c, &err), 0);
	text = json_dumps(c, 0);
	ck_assert_ptr_null(strstr(text, git_token));
	free(text);
	json_decref(c);
	cae_backend_free(b2);

	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	ck_assert_int_eq(cae_docker_container_inspect(d, pool_id, &c, NULL), -ENOENT);
	cae_env_info_clear(&info);
	drain(b);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Two processes prepare at once from a pool of one: exactly one gets the pool's container,
 * the other a cold prepare, and both environments work. */
START_TEST(two_claimers_pool_of_one)
{
	cfg_seq = 2;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	char pool_id[128];
	bt_pool_filled(b, pool_id, sizeof(pool_id), NULL, 0);
	bt_two_claimers("docker", cfg, b, pool_id, "caetest");
	drain(b);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A pool container past the maximum age is never handed out: the prepare is cold, and the
 * old one is removed. */
START_TEST(expired_never_handed_out)
{
	cfg_seq = 3;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	cae_docker *d = client();
	char pool_id[128];
	bt_pool_filled(b, pool_id, sizeof(pool_id), NULL, 0);
	json_t *mine = bt_own_pool(b);
	int64_t created = cae__parse_iso8601(
	    json_string_value(json_object_get(json_array_get(mine, 0), "created_at")));
	json_decref(mine);
	/* the same containers, with a maximum age of a second: the same pool key */
	cae_config *old = pcfg("1", "1");
	bt_wait_until(created + 2);
	cae_backend *ob = pbackend(old);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_env_info info = bt_prepare(ob, uuid);
	cae_error err = {0};
	ck_assert_str_ne(info.container_id, pool_id);
	json_t *c = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, pool_id, &c, NULL), -ENOENT);
	ck_assert_int_eq(cae_backend_cleanup(ob, uuid, &err), 0);
	cae_env_info_clear(&info);
	drain(b);
	cae_backend_free(ob);
	cae_config_free(old);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static bool none_of_ours(const char *uuid, void *ud)
{
	(void)uuid;
	(void)ud;
	return false;
}

/* A long-lived process's collector fills the pool and refills it after a claim; drain
 * removes this configuration's pool only. */
START_TEST(collector_refills_drain_is_own)
{
	cfg_seq = 4;
	cae_config *cfg = pcfg("1", "600");
	cfg_seq = 5;
	cae_config *other = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	cae_backend *ob = pbackend(other);
	ck_assert_int_eq(bt_fill(ob), 1);
	cae_collector_options co = {
	    .interval_ms = 3600 * 1000, .threshold_s = 86400, .filter = none_of_ours};
	cae_backend_collector *col = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_collector_start(b, &co, &col, &err), 0);
	ck_assert_uint_ge(cae_backend_collector_wait(col, 1, 120000), 1);
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 1);
	char first[128];
	snprintf(first, sizeof(first), "%s",
		 json_string_value(json_object_get(json_array_get(mine, 0), "container_id")));
	json_decref(mine);
	/* the same configuration as another instance: b's member is not its pool's (another
	 * key: never claimed), not in its status, and its drain and gc leave it */
	cae_config *xcfg = cae_config_dup(cfg);
	char xinst[64];
	snprintf(xinst, sizeof(xinst), "pool-other-%d", (int)getpid());
	bt_cfg_set(xcfg, "command_executor.instance", xinst);
	cae_backend *xb = pbackend(xcfg);
	json_t *st = NULL;
	ck_assert_int_eq(cae_backend_pool_status(xb, &st, &err), 0);
	size_t k;
	json_t *x;
	json_array_foreach(st, k, x)
	    ck_assert_str_ne(json_string_value(json_object_get(x, "container_id")), first);
	json_decref(st);
	int xn = -1;
	ck_assert_int_eq(cae_backend_pool_drain(xb, true, &xn, &err), 0);
	ck_assert_int_eq(xn, 0);
	ck_assert_int_eq(cae_backend_pool_gc(xb, &xn, &err), 0);
	ck_assert_int_eq(xn, 0);
	cae_backend_set_all_instances(xb, true);
	mine = bt_own_pool(xb);
	ck_assert_int_eq(json_array_size(mine), 0); /* this_config: another key */
	json_decref(mine);
	ck_assert_int_eq(cae_backend_pool_status(xb, &st, &err), 0);
	bool seen = false;
	json_array_foreach(st, k, x) seen |=
	    strcmp(json_string_value(json_object_get(x, "container_id")), first) == 0;
	json_decref(st);
	ck_assert(seen);
	cae_backend_free(xb);
	cae_config_free(xcfg);
	mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 1);
	json_decref(mine);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, first);
	/* refilled in the background: a new one, without another collection run */
	bool refilled = false;
	for (int i = 0; i < 1200 && !refilled; i++) {
		mine = bt_own_pool(b);
		refilled = json_array_size(mine) == 1 &&
			   strcmp(json_string_value(
				      json_object_get(json_array_get(mine, 0), "container_id")),
				  first) != 0;
		json_decref(mine);
		if (!refilled)
			nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	ck_assert(refilled);
	ck_assert_uint_eq(cae_backend_collector_wait(col, 1, 0), 1);
	cae_backend_collector_stop(col);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	/* drain: this configuration's pool only */
	int n = 0;
	ck_assert_int_eq(cae_backend_pool_drain(b, false, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);
	mine = bt_own_pool(ob);
	ck_assert_int_eq(json_array_size(mine), 1);
	json_decref(mine);
	ck_assert_int_eq(cae_backend_pool_drain(ob, false, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	cae_backend_free(ob);
	cae_backend_free(b);
	cae_config_free(other);
	cae_config_free(cfg);
}
END_TEST

/* How many `cae-helper --stream` processes run in container id (read from /proc by a root
 * exec: whatever their user). */
static int streams_in(cae_docker *d, const char *id)
{
	const char *argv[] = {"sh", "-c",
			      "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; "
			      "echo; done | grep -c -- '[-]-stream'",
			      NULL};
	cae_docker_exec_spec spec = {.argv = argv,
				     .user = "0:0",
				     .raw = true,
				     .timeout_ms = 60000,
				     .max_stdout = 4096,
				     .max_stderr = 4096,
				     .cancel_fd = -1};
	cae_run_result res;
	cae_error err = {0};
	ck_assert_msg(cae_docker_exec(d, id, &spec, &res, NULL, &err) == 0, "%s", err.message);
	int n = atoi(res.out ? res.out : "-1");
	cae_run_result_clear(&res);
	return n;
}

/* Waits (polling, a minute at most) until container id runs want helper streams. */
static void wait_streams(cae_docker *d, const char *id, int want)
{
	int n = -1;
	for (int i = 0; i < 600 && (n = streams_in(d, id)) != want; i++)
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
	ck_assert_msg(n == want, "%d helper streams in %s, not %d", n, id, want);
}

/* The filler keeps a stream to the member it started; once another process claimed the
 * member, the filler's next look at its pool closes that stream: no process keeps a stream
 * into another's task. */
START_TEST(kept_stream_goes_when_another_claims)
{
	cfg_seq = 6;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	cae_docker *d = client();
	char pool_id[128];
	bt_pool_filled(b, pool_id, sizeof(pool_id), NULL, 0);
	wait_streams(d, pool_id, 1);
	cae_backend *other = pbackend(cfg); /* another process's */
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_env_info info = bt_prepare(other, uuid);
	ck_assert_str_eq(info.container_id, pool_id);
	/* the claimer's own stream ends with its prepare; the filler's is still there */
	wait_streams(d, pool_id, 1);
	json_decref(bt_own_pool(b));
	wait_streams(d, pool_id, 0);
	/* the task's environment works from either */
	cae_run_result r = bt_exec(b, uuid, "id -u", 120000);
	ck_assert_str_eq(r.out, "1000\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(other, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(other);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* The filler's claim goes through the stream it kept; the filler and another process
 * preparing at once from a pool of one: exactly one gets the container, both environments
 * work. */
START_TEST(filler_and_another_claim_at_once)
{
	cfg_seq = 7;
	cae_config *cfg = pcfg("1", "600");
	_cleanup_free_ char *dir = tu_mkdtemp();
	_cleanup_free_ char *path = cae__path_join(dir, "log.jsonl");
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	cae_log *log = cae_log_new(fd, CAE_LOG_DEBUG);
	cae_backend *b = bt_backend("docker", cfg, log);
	char pool_id[128];
	bt_pool_filled(b, pool_id, sizeof(pool_id), NULL, 0);
	char u0[64];
	bt_task_uuid(u0, sizeof(u0), "caetest");
	cae_env_info i0 = bt_prepare(b, u0);
	ck_assert_str_eq(i0.container_id, pool_id);
	ck_assert_int_eq(tu_lines_with(path, "\"taken_through\":\"kept_stream\""), 1);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, u0, &err), 0);
	cae_env_info_clear(&i0);

	bt_pool_filled(b, pool_id, sizeof(pool_id), NULL, 0);
	char uuids[2][64];
	bt_task_uuid(uuids[0], sizeof(uuids[0]), "caetest");
	bt_task_uuid(uuids[1], sizeof(uuids[1]), "caetest");
	struct bt_preparer p;
	cae_task t = bt_http_task(uuids[1]);
	bt_preparer_start(&p, "docker", cfg, &t, 1);
	bt_preparer_wait_step(&p, 1);
	bt_preparer_go(&p);
	cae_env_info mine = bt_prepare(b, uuids[0]);
	char theirs[256];
	ck_assert_msg(bt_preparer_finish(&p, theirs, sizeof(theirs)), "the other: %s", theirs);
	bool filler_won = strcmp(mine.container_id, pool_id) == 0;
	int won = filler_won + (strcmp(theirs, pool_id) == 0);
	ck_assert_msg(won == 1, "pool container %s went to %d claimers (%s, %s)", pool_id, won,
		      mine.container_id, theirs);
	ck_assert_int_eq(tu_lines_with(path, "\"taken_through\":\"kept_stream\""), 1 + filler_won);
	for (int i = 0; i < 2; i++)
		bt_works_then_cleanup(b, uuids[i]);
	cae_env_info_clear(&mine);
	drain(b);
	cae_backend_free(b);
	cae_log_free(log);
	close(fd);
	cae_config_free(cfg);
}
END_TEST

/* A filler killed (SIGKILL) while it keeps a stream: the stream's helper in the container
 * ends with the connection, and the container is still handed out, whole. */
START_TEST(killed_filler_leaves_no_stream)
{
	cfg_seq = 8;
	cae_config *cfg = pcfg("1", "600");
	int ready[2];
	ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(ready[0]);
		cae_backend *fb = NULL;
		cae_error ferr = {0};
		int n = 0;
		if (cae_backend_new_named("docker", cfg, NULL, &fb, &ferr) < 0 ||
		    cae_backend_pool_fill(fb, -1, &n, &ferr) < 0 || n != 1 ||
		    write(ready[1], "1", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	close(ready[1]);
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(ready[0]);
	cae_backend *b = pbackend(cfg); /* another process's: it keeps nothing */
	cae_docker *d = client();
	char pool_id[128];
	bt_only_pool_entry(b, pool_id, sizeof(pool_id), NULL, 0);
	wait_streams(d, pool_id, 1);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	wait_streams(d, pool_id, 0);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, pool_id);
	bt_works_then_cleanup(b, uuid);
	cae_env_info_clear(&info);
	drain(b);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *u = tcase_create("unit");
	tcase_add_test(u, pool_config_rules);
	suite_add_tcase(s, u);
	TCase *p = bt_tcase(s, "pool", 600, sweep);
	tcase_add_test(p, warm_prepare_is_the_tasks);
	tcase_add_test(p, two_claimers_pool_of_one);
	tcase_add_test(p, expired_never_handed_out);
	tcase_add_test(p, collector_refills_drain_is_own);
	tcase_add_test(p, kept_stream_goes_when_another_claims);
	tcase_add_test(p, filler_and_another_claim_at_once);
	tcase_add_test(p, killed_filler_leaves_no_stream);
	return s;
}

int main(void)
{
	dt_init();
	bt_init();
	return tu_run(make_suite());
}
