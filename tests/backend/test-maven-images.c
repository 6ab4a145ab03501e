/* A real mvn taking its artifacts from Maven's shared repository (pkgcache-maven.c) in a
 * container and in a pod: the environment "java" is cae-test-maven (Debian's maven and a
 * headless JDK on the python test image, tests/docker/Dockerfile-test-maven), which
 * `scripts/docker-env.sh maven` builds and the kubernetes lane of scripts/check.sh builds
 * and imports into the cluster at its start. The remote and the project are the local
 * backend's (tests/data/maven: the remote served on the loopback, a project whose plugin runs
 * an attacker's forge.sh during the prepare's install). On each backend, A's prepare
 * resolves from the remote and cae fills the shared repository with the remote's bytes (none
 * of A's forged files); then the remote is gone, and B's prepare and B's own mvn resolve from
 * the shared repository alone: docker's /cache/maven, bound read-only; on kubernetes, cae's
 * server at http://127.0.0.1:3129/maven/ through the pod's helper.
 *
 * Needs CAE_TEST_DOCKER=1 and CAE_TEST_K8S=1 with the cluster's KUBECONFIG (skipped, exit
 * 77, otherwise), in the kubernetes suite: its lane runs one test at a time, so no other
 * pod holds the port 3129 of the host's network. Removes only what it made. */
#include "backend-test.h"
#include "dockertest.h"

#include "base/fs.h"
#include "runner/proctree.h"

#include <limits.h>
#include <sys/wait.h>

#define TASK_PREFIX "caetest-mvnimg"
#define IMAGE "cae-test-maven:latest"
#define J "javax/inject/javax.inject/1/javax.inject-1"

/* The remote of tests/data/maven in a directory of its own, served by python3's http.server
 * on the loopback (a child of ours known to the runner). */
struct remote {
	char *dir, *work; /* the remote's files; the project's repository */
	int port;
	pid_t server;
	char url[64];
};

static void remote_start(struct remote *m)
{
	m->dir = tu_mkdtemp();
	m->work = tu_mkdtemp();
	m->port = tu_free_port();
	shf("set -e; cd %s && git init -q -b main && sh %s/tests/data/maven/make.sh %s %s %d "
	    ">/dev/null && git add . && git -c user.email=t@e -c user.name=t commit -qm maven",
	    m->work, CAE_SOURCE_ROOT, m->dir, m->work, m->port);
	snprintf(m->url, sizeof(m->url), "http://127.0.0.1:%d/maven2", m->port);
	m->server = fork();
	ck_assert_int_ge(m->server, 0);
	if (m->server == 0) {
		char p[16], www[PATH_MAX];
		snprintf(p, sizeof(p), "%d", m->port);
		snprintf(www, sizeof(www), "%s/www", m->dir);
		int fd = open("/dev/null", O_RDWR);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(www) < 0)
			_exit(127);
		execl("/usr/bin/python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", p,
		      (char *)NULL);
		_exit(127);
	}
	cae__proctree_lock();
	cae__proctree_register(m->server);
	cae__proctree_unlock();
	tu_sh("for i in $(seq 100); do curl -sf -o /dev/null %s/%s.pom && exit 0; sleep 0.1; "
	      "done; exit 1",
	      m->url, J);
}

static void remote_stop(struct remote *m)
{
	if (m->server <= 0)
		return;
	cae__proctree_unregister(m->server);
	kill(m->server, SIGTERM);
	waitpid(m->server, NULL, 0);
	m->server = 0;
	tu_sh("! curl -sf -o /dev/null %s/%s.pom", m->url, J);
}

static void remote_free(struct remote *m)
{
	remote_stop(m);
	cae__rm_rf(m->dir);
	cae__rm_rf(m->work);
	free(m->dir);
	free(m->work);
}

/* A configuration of backend (bt_*_configure) with a state directory of its own (*state),
 * the shared caches on, Maven's remote m and "java" in cae-test-maven. */
static cae_config *mcfg(const char *backend, const struct remote *m, char **state)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	*state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", *state);
	if (strcmp(backend, "docker") == 0)
		bt_docker_configure(cfg, "512");
	else
		bt_kubernetes_configure(cfg, "1g");
	bt_cfg_set(cfg, "github.token", git_token);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	bt_cfg_set(cfg, "command_executor.package_cache.maven_remote", m->url);
	bt_cfg_set(cfg, "command_executor.environments",
		   "python=coding-agent-executor-python:latest,java=" IMAGE);
	return cfg;
}

/* Prepares t in "java"; the prepare's Maven install (the project's pom.xml) must succeed. */
static void prepare_java(cae_backend *b, const cae_task *t)
{
	cae_env_info info;
	cae_error err = {0};
	cae_prepare_options o = {.cancel_fd = -1};
	ck_assert_msg(cae_backend_prepare(b, t, "java", &o, &info, &err) == 0, "%s", err.message);
	json_t *d = NULL, *e;
	size_t i;
	json_array_foreach(info.deps, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "manifest")), "pom.xml") == 0)
			d = e;
	}
	char *ws = json_dumps(info.warnings, 0);
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s: %s %s", t->uuid,
		      d ? json_string_value(json_object_get(d, "output")) : "no mvn", ws);
	free(ws);
	cae_env_info_clear(&info);
}

/* After A: the shared repository holds the remote's bytes of what A resolved (the project's
 * dependency, the plugin and the plugin's dependency) and of the file A only named, each with
 * the remote's .sha1, and none of A's forged files, its snapshot or its names outside
 * Maven's layout. */
static void filled_from_the_remote(const char *state, const struct remote *m)
{
	shf("set -e; S=$(echo %s/package-cache/*/maven); M=%s/www/maven2; for f in " J ".jar " J
	    ".pom org/codehaus/plexus/plexus-utils/3.4.2/plexus-utils-3.4.2.jar "
	    "cae/test/cae-maven-plugin/1.0/cae-maven-plugin-1.0.jar "
	    "org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.jar; do cmp "
	    "$S/$f $M/$f; test \"$(cat $S/$f.sha1)\" = \"$(cat $M/$f.sha1)\"; done; ! grep -rl "
	    "FORGED $S; test -z \"$(find $S -name '*evil*' -o -name '*SNAPSHOT*' -o -name "
	    "'*escape*' -o -name 'y-1.jar')\"",
	    state, m->dir);
}

/* B's own mvn, the remote gone, into an empty local repository: the project's dependency
 * on its classpath, the remote's bytes, taken from the repository named cae-package-cache;
 * what more (a script) says after. */
static void resolves_from_the_cache(cae_backend *b, const char *uuid, const struct remote *m,
				    const char *more, const char *more_out)
{
	char script[1024], path[PATH_MAX];
	snprintf(script, sizeof(script),
		 "mvn -B -Dmaven.repo.local=/tmp/fresh dependency:resolve > /tmp/mvn.log 2>&1; "
		 "grep -c '^cp: /tmp/fresh/" J ".jar' /tmp/mvn.log; sha1sum < /tmp/fresh/" J
		 ".jar | cut -c1-40; grep -h cae-package-cache /tmp/fresh/javax/inject/"
		 "javax.inject/1/_remote.repositories | cut -d'>' -f2; %s",
		 more);
	cae_run_result r = bt_exec(b, uuid, script, 300000);
	_cleanup_free_ char *sum = NULL, *want = NULL;
	snprintf(path, sizeof(path), "%s/www/maven2/" J ".jar.sha1", m->dir);
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 100, &sum, NULL), 0);
	ck_assert_int_ge(
	    asprintf(&want, "1\n%.40s\ncae-package-cache=\ncae-package-cache=\n%s", sum, more_out),
	    0);
	if (strcmp(r.out, want) != 0) {
		cae_run_result l = bt_exec(b, uuid, "tail -n 20 /tmp/mvn.log | cut -c1-150", 60000);
		ck_abort_msg("%.300s%.300s\nmvn said:\n%.3000s", r.out, r.err, l.out);
	}
	cae_run_result_clear(&r);
}

static void cleanup(cae_backend *b, const char *uuid)
{
	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup(b, uuid, &err) == 0, "%s", err.message);
}

/* Docker, on the host's network: A (the remote up) fills the shared repository; B (the
 * remote gone) resolves, in its prepare and with its own mvn, from /cache/maven, where its
 * commands cannot write. Failed before (the caches off): B's prepare could not resolve. */
START_TEST(maven_in_a_container)
{
	struct remote m;
	remote_start(&m);
	char *state;
	cae_config *cfg = mcfg("docker", &m, &state);
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char ua[64], ub[64];
	/* (named as dockertest.h's sweep finds them) */
	bt_task_uuid(ua, sizeof(ua), "caetest");
	bt_task_uuid(ub, sizeof(ub), "caetest");
	cae_task ta = {.uuid = ua, .repo = m.work}, tb = {.uuid = ub, .repo = m.work};
	prepare_java(b, &ta);
	filled_from_the_remote(state, &m);
	cleanup(b, ua);
	remote_stop(&m);
	prepare_java(b, &tb);
	resolves_from_the_cache(b, ub, &m,
				"for f in " J ".jar x; do touch /cache/maven/$f 2>/dev/null && "
				"echo wrote; done; test -f /cache/maven/" J ".jar && echo there",
				"there\n");
	cleanup(b, ub);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
	remote_free(&m);
}
END_TEST

/* Kubernetes, a pod on the host's network: A's pod (the remote up) fills the shared
 * repository; B's pod (the remote gone) resolves, in its prepare and with its own mvn, from
 * cae's server at 127.0.0.1:3129 (or the next free port)/maven/ ("Downloaded from
 * cae-package-cache"). Failed before
 * (the caches off): B's prepare could not resolve. */
START_TEST(maven_in_a_pod)
{
	struct remote m;
	remote_start(&m);
	char repo[64], url[512];
	snprintf(repo, sizeof(repo), "mvnimg-%d.git", (int)getpid());
	shf("rm -rf %s/%s && git clone -q --bare %s %s/%s", git_root, repo, m.work, git_root, repo);
	snprintf(url, sizeof(url), "%s%s", git_http, repo);
	char *state;
	cae_config *cfg = mcfg("kubernetes", &m, &state);
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	char ua[64], ub[64];
	bt_task_uuid(ua, sizeof(ua), TASK_PREFIX);
	bt_task_uuid(ub, sizeof(ub), TASK_PREFIX);
	cae_task ta = {.uuid = ua, .repo = url, .platform = (char *)"github"},
		 tb = {.uuid = ub, .repo = url, .platform = (char *)"github"};
	prepare_java(b, &ta);
	filled_from_the_remote(state, &m);
	/* (one pod at a time: B's own Maven, not A's, must serve B) */
	cleanup(b, ua);
	remote_stop(&m);
	prepare_java(b, &tb);
	resolves_from_the_cache(b, ub, &m,
				"grep -c \"^\\[INFO\\] Downloaded from cae-package-cache: "
				"$CAE_PACKAGE_CACHE_URL/maven/" J ".jar \" /tmp/mvn.log",
				"1\n");
	cleanup(b, ub);
	shf("rm -rf %s/%s", git_root, repo);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
	remote_free(&m);
}
END_TEST

static void sweep_pods(void)
{
	bt_k8s_sweep(TASK_PREFIX, NULL);
}

static Suite *make_suite(void)
{
	Suite *s = suite_create("maven-images");
	TCase *d = bt_tcase(s, "docker", 900, sweep);
	tcase_add_test(d, maven_in_a_container);
	TCase *k = bt_tcase(s, "kubernetes", 900, sweep_pods);
	tcase_add_test(k, maven_in_a_pod);
	return s;
}

int main(void)
{
	const char *docker = getenv("CAE_TEST_DOCKER");
	if (!docker || strcmp(docker, "1") != 0) {
		fprintf(stderr, "CAE_TEST_DOCKER is not 1: no engine to test against (skipped)\n");
		return 77;
	}
	dt_init();
	return bt_k8s_main(make_suite);
}
