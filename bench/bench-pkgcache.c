/* bench-pkgcache: the shared package cache (command_executor.package_cache) on the local
 * backend (or docker's, or kubernetes' for npm: BENCH_PKGCACHE_BACKEND below): `npm ci` of one lock
 * file (express 4.21.2: 72 packages, from the npm registry) in a prepare's dependency step, each in
 * a new environment:
 *
 *   cold      the cache off (every package from the registry, npm's own cache empty)
 *   first     the cache on and empty (fills it)
 *   second    the cache on, filled by first: a new environment of the same lock file
 *
 * The figure is the install's own duration (deps[].duration_ms of the prepare's result): on
 * the local backend, second's is the link of the shared node_modules tree that first's npm
 * ci left (pkgcache.h), when the lock file may have one (this one may), and the bench says
 * how many prepares took one.
 *
 * Then the same three for Go: `go test ./...` of a small module that imports only the
 * standard library (encoding/json, net/http, regexp, strings; GOFLAGS=-mod=mod, GOPROXY=off:
 * no module proxy is needed), the first command of a new environment: cold with Go's build
 * cache the environment's own and empty, first with the shared one on (the prepare fills
 * it), second in a new environment (the prepare links it). The figure is the command's
 * duration_ms.
 *
 * And for Maven (BENCH_PKGCACHE_TOOLS=maven; local): the prepare's `mvn dependency:resolve`
 * of a project that depends on maven-core 3.8.7 (35 jars, 8.5 MB: Debian's
 * /usr/share/maven-repo, served as the project's remote on the loopback, with the tests'
 * plugin of tests/data/maven), cold with the cache off, first with it on (the fill after
 * the install is not in the figure), second in a new environment, which takes every file
 * from the shared repository (/cache/maven). The figure is the install's duration. The
 * remote answers each request after BENCH_PKGCACHE_MAVEN_DELAY_MS (30: a distant
 * repository's round trip; 0: the loopback's, where Maven's own start dominates), which is
 * what the shared repository saves (Maven 3.8 asks for each file and its checksum in turn).
 *
 *   build/bench/bench-pkgcache   (BENCH_PKGCACHE_N: rounds, 5; BENCH_PKGCACHE_TOOLS: npm,go;
 *                                 BENCH_PKGCACHE_BACKEND: local (bubblewrap, npm and the npm
 *                                 registry, go), docker (the language images, run from the
 *                                 build directory: its cae-helper-static) or kubernetes (npm
 *                                 and go: the cluster of scripts/k8s-env.sh up, its
 *                                 KUBECONFIG, run from the build directory; the
 *                                 repositories served by scripts/git-server.sh on the
 *                                 loopback, the pods on the host's network);
 *                                 BENCH_PKGCACHE_NODE_IMAGE: the node environment's image
 *                                 (kubernetes: cae-test-node:latest, which
 *                                 CAE_TEST_K8S_IMAGES=cae-test-node scripts/k8s-env.sh up
 *                                 imports; go's: coding-agent-executor-go))
 *
 * On kubernetes, second's npm figure is the put of the shared tree that cae took out of
 * first's pod after its npm ci (pkgcache-npm-kubernetes.c), and Go's GOCACHE is the copy
 * of the image's, filled in a pod of cae's (pkgcache-go-kubernetes.c).
 *
 * Each tool's medians over the rounds are printed beside each other. Targets: second at
 * least 2x faster than cold for npm, 3x for Go. */
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the backend measured: BENCH_PKGCACHE_BACKEND (local, docker) */
static const char *backend_name = "local";
/* the Maven rounds' remote (NULL: not the Maven rounds) */
static const char *maven_remote;
/* "python=...,node=IMAGE": the environments (NULL: the configuration's) */
static char *node_image;

static cae_config *config(const char *state_dir, bool cache)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	const char *dh = getenv("DOCKER_HOST");
	if ((dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0) ||
	    cae_config_set(cfg, "command_executor.backend", backend_name, &err) < 0 ||
	    cae_config_set(cfg, "command_executor.state_dir", state_dir, &err) < 0 ||
	    cae_config_set(cfg, "command_executor.package_cache.enabled", cache ? "true" : "false",
			   &err) < 0 ||
	    /* npm's registry from a container: the host's network */
	    cae_config_set(cfg, "command_executor.docker.network.mode", "host", &err) < 0 ||
	    /* the single-node cluster of scripts/k8s-env.sh, its images imported */
	    (strcmp(backend_name, "kubernetes") == 0 &&
	     (cae_config_set(cfg, "command_executor.kubernetes.namespace", "default", &err) < 0 ||
	      cae_config_set(cfg, "command_executor.kubernetes.node_name", "localhost", &err) < 0 ||
	      cae_config_set(cfg, "command_executor.kubernetes.image_pull_policy", "Never", &err) <
		  0)) ||
	    /* Maven's fill: for an environment with the network itself */
	    (strcmp(backend_name, "kubernetes") == 0 &&
	     (cae_config_set(cfg, "command_executor.kubernetes.namespace", "default", &err) < 0 ||
	      cae_config_set(cfg, "command_executor.kubernetes.node_name", "localhost", &err) < 0 ||
	      cae_config_set(cfg, "command_executor.kubernetes.image_pull_policy", "Never", &err) <
		  0)) ||
	    (node_image &&
	     cae_config_set(cfg, "command_executor.environments", node_image, &err) < 0) ||
	    (maven_remote &&
	     (cae_config_set(cfg, "command_executor.local.network", "true", &err) < 0 ||
	      cae_config_set(cfg, "command_executor.package_cache.maven_remote", maven_remote,
			     &err) < 0))) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

/* prepares whose node_modules was a shared tree (no npm ci ran) */
static int trees;

/* One prepare of repo in a new environment: the npm ci's duration in ms, -1 on failure. */
static int64_t npm_ci_ms(cae_config *cfg, const char *repo, const char *uuid)
{
	cae_backend *b;
	cae_error err = {0};
	if (cae_backend_new_named(backend_name, cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	cae_task t = {.uuid = (char *)uuid, .repo = (char *)repo};
	cae_env_info info;
	int64_t ms = -1;
	if (cae_backend_prepare(b, &t, "node", NULL, &info, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: prepare: %s\n", err.message);
	} else {
		json_t *d = json_array_get(info.deps, 0);
		if (json_is_true(json_object_get(d, "shared_node_modules")))
			trees++;
		if (json_is_true(json_object_get(d, "success")))
			ms = json_integer_value(json_object_get(d, "duration_ms"));
		else
			fprintf(stderr, "bench-pkgcache: npm ci failed: %s\n",
				json_string_value(json_object_get(d, "output")));
		cae_env_info_clear(&info);
	}
	cae_backend_cleanup(b, uuid, &err);
	cae_backend_free(b);
	return ms;
}

/* One prepare of repo in a new environment, then `go test ./...` as its first command: the
 * command's duration in ms, -1 on failure. */
static int64_t go_test_ms(cae_config *cfg, const char *repo, const char *uuid)
{
	cae_backend *b;
	cae_error err = {0};
	if (cae_backend_new_named(backend_name, cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	cae_task t = {.uuid = (char *)uuid, .repo = (char *)repo};
	cae_env_info info;
	int64_t ms = -1;
	if (cae_backend_prepare(b, &t, "go", NULL, &info, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: prepare: %s\n", err.message);
	} else {
		cae_env_info_clear(&info);
		const char *argv[] = {"go", "test", "./...", NULL};
		const char *env[] = {"GOFLAGS=-mod=mod", "GOPROXY=off", NULL};
		cae_exec_request req = {
		    .argv = argv, .extra_env = env, .timeout_ms = 600000, .cancel_fd = -1};
		cae_run_result res = {0};
		if (cae_backend_exec(b, uuid, &req, &res, &err) < 0)
			fprintf(stderr, "bench-pkgcache: go test: %s\n", err.message);
		else if (res.exit_code != 0)
			fprintf(stderr, "bench-pkgcache: go test failed: %s%s\n", res.out, res.err);
		else
			ms = res.duration_ms;
		cae_run_result_clear(&res);
	}
	cae_backend_cleanup(b, uuid, &err);
	cae_backend_free(b);
	return ms;
}

/* The whole prepares of the Maven rounds, cold's and first's (the fill after the install is
 * in first's), in ms. */
static int64_t prep_cold[64], prep_first[64];
static int n_cold, n_first;

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One prepare of repo in a new java environment: its `mvn dependency:resolve`'s duration in
 * ms, -1 on failure. */
static int64_t mvn_ms(cae_config *cfg, const char *repo, const char *uuid)
{
	cae_backend *b;
	cae_error err = {0};
	if (cae_backend_new_named(backend_name, cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	cae_task t = {.uuid = (char *)uuid, .repo = (char *)repo};
	cae_env_info info;
	int64_t ms = -1;
	int64_t t0 = now_ms();
	if (cae_backend_prepare(b, &t, "java", NULL, &info, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: prepare: %s\n", err.message);
	} else {
		int64_t whole = now_ms() - t0;
		if (strstr(uuid, "-cold-") && n_cold < 64)
			prep_cold[n_cold++] = whole;
		if (strstr(uuid, "-first-") && n_first < 64)
			prep_first[n_first++] = whole;
		json_t *d = json_array_get(info.deps, 0);
		if (json_is_true(json_object_get(d, "success")))
			ms = json_integer_value(json_object_get(d, "duration_ms"));
		else
			fprintf(stderr, "bench-pkgcache: mvn failed: %s\n",
				json_string_value(json_object_get(d, "output")));
		size_t i;
		json_t *w;
		json_array_foreach(info.warnings, i, w)
		    fprintf(stderr, "bench-pkgcache: %s\n", json_string_value(w));
		cae_env_info_clear(&info);
	}
	cae_backend_cleanup(b, uuid, &err);
	cae_backend_free(b);
	return ms;
}

static int64_t median(int64_t *v, int n)
{
	if (n <= 0)
		return -1;
	qsort(v, (size_t)n, sizeof(*v), bench_cmp64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef int64_t (*round_fn)(cae_config *cfg, const char *repo, const char *uuid);

/* n rounds of cold, first, second of fn on repo; prints each and the medians. */
static void rounds(const char *root, const char *tool, round_fn fn, const char *repo, int n)
{
	int64_t cv[64], fv[64], sv[64];
	int k = 0;
	char state_cold[4200], state_cache[4200];
	printf("%-6s %10s %10s %10s %8s\n", "round", "cold ms", "first ms", "second ms",
	       "cold/2nd");
	for (int i = 0; i < n && i < 64; i++) {
		snprintf(state_cold, sizeof(state_cold), "%s/state-%s-cold-%d", root, tool, i);
		snprintf(state_cache, sizeof(state_cache), "%s/state-%s-cache-%d", root, tool, i);
		cae_config *cold = config(state_cold, false), *cached = config(state_cache, true);
		char u1[64], u2[64], u3[64];
		snprintf(u1, sizeof(u1), "bench-pkgcache-%s-cold-%d", tool, i);
		snprintf(u2, sizeof(u2), "bench-pkgcache-%s-first-%d", tool, i);
		snprintf(u3, sizeof(u3), "bench-pkgcache-%s-second-%d", tool, i);
		int64_t c = fn(cold, repo, u1);
		int64_t f = fn(cached, repo, u2);
		int64_t s = fn(cached, repo, u3);
		printf("%-6d %10lld %10lld %10lld %8.2f\n", i + 1, (long long)c, (long long)f,
		       (long long)s, s > 0 ? (double)c / (double)s : 0.0);
		fflush(stdout);
		if (c > 0 && f > 0 && s > 0) {
			cv[k] = c;
			fv[k] = f;
			sv[k] = s;
			k++;
		}
		cae_config_free(cold);
		cae_config_free(cached);
	}
	int64_t mc = median(cv, k), mf = median(fv, k), ms = median(sv, k);
	printf("%-6s %10lld %10lld %10lld %8.2f   (%s, %d rounds)\n", "median", (long long)mc,
	       (long long)mf, (long long)ms, ms > 0 ? (double)mc / (double)ms : 0.0, tool, k);
	if (strcmp(tool, "npm") == 0)
		printf(
		    "(%d of the npm prepares took a shared node_modules tree instead of npm ci)\n",
		    trees);
	fflush(stdout);
}

/* kubernetes: the repository at repo served on the loopback as <name>.git (the server
 * started by the first call, in root/srv), its URL into repo. */
static char served[512];
static int serve(const char *root, const char *name, char *repo, size_t size)
{
	if (!served[0] && bench_small_repo_serve("bench-pkgcache", root, CAE_SOURCE_ROOT,
						 "GIT_DAEMON_URL=", served, sizeof(served)) < 0)
		return -1;
	char cmd[10000];
	snprintf(cmd, sizeof(cmd), "git clone -q --bare %s %s/srv/%s.git", repo, root, name);
	if (bench_sh(cmd) != 0)
		return -1;
	/* the server's address, <name>.git in place of small.git */
	snprintf(repo, size, "%.*s%s.git", (int)(strlen(served) - 9), served, name);
	return 0;
}

int main(void)
{
	int n = bench_env_int("BENCH_PKGCACHE_N", 5);
	const char *be = getenv("BENCH_PKGCACHE_BACKEND");
	if (be && (strcmp(be, "docker") == 0 || strcmp(be, "kubernetes") == 0)) {
		backend_name = strcmp(be, "docker") == 0 ? "docker" : "kubernetes";
		bench_use_static_helper("."); /* the helper that goes into containers */
	}
	bool k8s = strcmp(backend_name, "kubernetes") == 0;
	const char *ni = getenv("BENCH_PKGCACHE_NODE_IMAGE");
	if ((ni && *ni) || k8s) {
		if (asprintf(&node_image,
			     "python=coding-agent-executor-python:latest,node=%s,"
			     "go=coding-agent-executor-go:latest",
			     ni && *ni ? ni : "cae-test-node:latest") < 0)
			return 1;
	}
	const char *tools = getenv("BENCH_PKGCACHE_TOOLS");
	if (!tools || !*tools)
		tools = "npm,go";
	char tmpl[] = "/tmp/bench-pkgcache-XXXXXX";
	char *root = mkdtemp(tmpl);
	if (!root)
		return 1;
	char repo[4200], cmd[10000];
	if (strstr(tools, "npm")) {
		snprintf(repo, sizeof(repo), "%s/repo", root);
		snprintf(cmd, sizeof(cmd),
			 "mkdir -p %s && cd %s && git init -q && printf '{\"name\":\"b\","
			 "\"version\":\"1.0.0\",\"dependencies\":{\"express\":\"4.21.2\"}}\\n' > "
			 "package.json && npm install --package-lock-only --ignore-scripts "
			 "--no-audit --no-fund --omit-lockfile-registry-resolved=false --cache "
			 "%s/npm >/dev/null 2>&1 && git add . && git -c "
			 "user.name=b -c user.email=b@b commit -qm lock",
			 repo, repo, root);
		if (bench_sh(cmd) != 0) {
			fprintf(stderr,
				"bench-pkgcache: could not make the lock file (npm registry?)\n");
			return 1;
		}
		/* a pod clones over the network: the repository served on the loopback */
		if (k8s && serve(root, "npm", repo, sizeof(repo)) < 0)
			return 1;
		printf("npm ci of express 4.21.2 (its lock file), a new %s environment each, "
		       "%d rounds\n",
		       backend_name, n);
		rounds(root, "npm", npm_ci_ms, repo, n);
	}
	if (strstr(tools, "go")) {
		snprintf(repo, sizeof(repo), "%s/gorepo", root);
		snprintf(cmd, sizeof(cmd),
			 "mkdir -p %s && cd %s && git init -q && printf 'module example.com/b\\n\\n"
			 "go 1.19\\n' > go.mod && printf 'package b\\n\\nimport "
			 "(\\n\\t\"encoding/json\"\\n"
			 "\\t\"net/http\"\\n\\t\"regexp\"\\n\\t\"strings\"\\n)\\n\\nfunc Up(s "
			 "string) string "
			 "{ return strings.ToUpper(s) }\\n\\nfunc Match(s string) bool { return "
			 "regexp.MustCompile(`^a+$`).MatchString(s) }\\n\\nfunc Enc(v any) string "
			 "{ b, _ "
			 ":= json.Marshal(v); return string(b) }\\n\\nvar _ = http.StatusOK\\n' > "
			 "b.go && "
			 "printf 'package b\\n\\nimport \"testing\"\\n\\nfunc TestB(t *testing.T) "
			 "{\\n\\tif "
			 "Up(\"a\") != \"A\" || !Match(\"aa\") || Enc(1) != \"1\" "
			 "{\\n\\t\\tt.Fatal(\"b\")\\n\\t}\\n}\\n' "
			 "> b_test.go && git add . && git -c user.name=b -c user.email=b@b commit "
			 "-qm go",
			 repo, repo);
		if (bench_sh(cmd) != 0) {
			fprintf(stderr, "bench-pkgcache: could not make the Go module\n");
			return 1;
		}
		/* a pod clones over the network: the module served on the loopback */
		if (k8s && serve(root, "go", repo, sizeof(repo)) < 0)
			return 1;
		printf(
		    "go test ./... of a module of the standard library (json, http, regexp), the "
		    "first command of a new %s environment, %d rounds\n",
		    backend_name, n);
		rounds(root, "go", go_test_ms, repo, n);
	}
	if (strstr(tools, "maven")) {
		int port = 40000 + (int)(getpid() % 20000);
		int delay = bench_env_int("BENCH_PKGCACHE_MAVEN_DELAY_MS", 30);
		char remote[128];
		snprintf(remote, sizeof(remote), "http://127.0.0.1:%d/maven2/", port);
		snprintf(repo, sizeof(repo), "%s/mvnrepo", root);
		snprintf(
		    cmd, sizeof(cmd),
		    "set -e; D=%s/mvn; R=%s; mkdir -p $D $R; cd $R; git init -q; sh "
		    "%s/tests/data/maven/make.sh $D $R %d >/dev/null; rm forge.sh; sed -i "
		    "'s|<dependencies>|<dependencies><dependency><groupId>org.apache.maven</"
		    "groupId>"
		    "<artifactId>maven-core</artifactId><version>3.8.7</version></dependency>|' "
		    "pom.xml; git add .; git -c user.name=b -c user.email=b@b commit -qm mvn; cp "
		    "-rL "
		    "/usr/share/maven-repo/. $D/www/maven2/; find $D/www/maven2 -type f ! -name "
		    "'*.sha1' | while read -r f; do [ -f \"$f.sha1\" ] || sha1sum < \"$f\" | cut "
		    "-c1-40 > \"$f.sha1\"; done; cd $D/www; python3 "
		    "%s/tests/data/maven/serve.py %d %d >/dev/null 2>&1 & echo $! > $D/pid; for i "
		    "in $(seq 100); do curl "
		    "-sf -o /dev/null %sjavax/inject/javax.inject/1/javax.inject-1.pom && exit 0; "
		    "sleep 0.1; done; exit 1",
		    root, repo, CAE_SOURCE_ROOT, port, CAE_SOURCE_ROOT, port, delay, remote);
		if (bench_sh(cmd) != 0) {
			fprintf(stderr, "bench-pkgcache: could not make the Maven remote (mvn, "
					"javac, /usr/share/maven-repo?)\n");
			return 1;
		}
		maven_remote = remote;
		printf("mvn dependency:resolve of maven-core 3.8.7 (35 jars) from a remote on the "
		       "loopback answering each request after %d ms, a new %s environment each, %d "
		       "rounds\n",
		       delay, backend_name, n);
		rounds(root, "maven", mvn_ms, repo, n);
		maven_remote = NULL;
		int64_t pc = median(prep_cold, n_cold), pf = median(prep_first, n_first);
		printf("(whole prepares, medians: cold %lld ms, first %lld ms: the fill after "
		       "first's install takes about %lld ms)\n",
		       (long long)pc, (long long)pf, (long long)(pf - pc));
		snprintf(cmd, sizeof(cmd), "kill $(cat %s/mvn/pid)", root);
		bench_sh(cmd);
	}
	if (served[0])
		bench_small_repo_stop(root, CAE_SOURCE_ROOT);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	bench_sh(cmd);
	free(node_image);
	return 0;
}
