/* The network proxy's cost (issue 24): the connection set-up it adds (a CONNECT through
 * cae's proxy to a name it resolves and checks, next to a direct connect to the same
 * loopback server; target <= 1 ms added), and a 100 MB download through the proxy next to
 * the direct one (target >= 0.8x the direct throughput), measured in the same run: pairs of
 * downloads, one each way in alternating order, so that each pair's ratio sees one machine
 * (the median of the ratios, and how many pairs reach 0.8x), with the CPU time per MiB
 * (user + system, getrusage) of the server's thread, the client's and the proxy's (the rest
 * of the process), which a busy machine's noise does not hide as it does the throughput.
 * With a build directory and CAE_BENCH_NET_DOCKER=1, also the whole path of a container's
 * connection: a docker environment of network none with an allow-list (scripts/docker-env.sh
 * up), curl in it downloading 100 MB through the helper's 127.0.0.1:3128, whose listeners the
 * helper handed to cae's proxy in the `cae exec` process (src/backend/net-handover.h), next
 * to the same curl on this host straight to the server and to the same download over the
 * fallback (the handover directory moved away for that exec: every connection a tunnel over
 * the attach stream, src/helper/tun.c), interleaved. With CAE_BENCH_NET_K8S=1 (and the test
 * cluster's KUBECONFIG, from the source root), the same in a kubernetes pod, whose
 * connections always cross the exec stream through the API server.
 * usage: bench-net [BUILD_DIR]   (CAE_BENCH_NET_ROUNDS: set-ups per side, 2000, 0 for none;
 * CAE_BENCH_NET_PAIRS: downloads each way, 15) */
#include "cae/net.h"
#include "benchutil.h"

#include "base/timeutil.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define BULK (100u << 20)

/* CPU time (user + system, ns) of the calling thread, or of the whole process. */
static int64_t cpu_ns(int who)
{
	struct rusage u;
	getrusage(who, &u);
	return (int64_t)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000 +
	       (int64_t)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000;
}

/* The CPU time the server thread spent on its last bulk transfer, posted when it is there. */
static int64_t server_cpu;
static sem_t server_done;

static cae_net_proxy *the_proxy;

static int listen_any(struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t sl = sizeof(*a);
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)a, sl) < 0 || listen(fd, 512) < 0 ||
	    getsockname(fd, (struct sockaddr *)a, &sl) < 0) {
		perror("listen");
		exit(1);
	}
	return fd;
}

/* The server: a byte 'p' gets one byte back; a byte 'b' gets BULK bytes; an HTTP request
 * ('G') an HTTP/1.0 response of BULK bytes; then it closes. */
static void *serve_one(void *arg)
{
	int c = (int)(intptr_t)arg;
	char b;
	if (read(c, &b, 1) == 1) {
		if (b == 'G') {
			/* the request's head, up to its empty line */
			char h[4096];
			size_t n = 0;
			while (n < sizeof(h) && (n < 4 || memcmp(h + n - 4, "\r\n\r\n", 4) != 0) &&
			       read(c, h + n, 1) == 1)
				n++;
			char head[128];
			int k = snprintf(head, sizeof(head),
					 "HTTP/1.0 200 OK\r\nContent-Length: %u\r\n\r\n", BULK);
			(void)!write(c, head, (size_t)k);
			b = 'b';
		}
		if (b == 'b') {
			static char chunk[1 << 16];
			int64_t c0 = cpu_ns(RUSAGE_THREAD);
			for (size_t sent = 0; sent < BULK;) {
				ssize_t w = write(c, chunk, sizeof(chunk));
				if (w <= 0)
					break;
				sent += (size_t)w;
			}
			close(c);
			server_cpu = cpu_ns(RUSAGE_THREAD) - c0;
			sem_post(&server_done);
			return NULL;
		} else {
			(void)!write(c, "k", 1);
		}
	}
	close(c);
	return NULL;
}

static void *server_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	for (;;) {
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			continue;
		pthread_t t;
		if (pthread_create(&t, NULL, serve_one, (void *)(intptr_t)c) == 0)
			pthread_detach(t);
		else
			close(c);
	}
	return NULL;
}

static int dial(const struct sockaddr_in *a)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) < 0) {
		perror("connect");
		exit(1);
	}
	return fd;
}

/* A connection to the server, direct or through the proxy's CONNECT, ready for the byte. */
static int open_conn(const struct sockaddr_in *server, const struct sockaddr_in *proxy)
{
	if (!proxy)
		return dial(server);
	int fd = dial(proxy);
	char req[128], resp[64];
	int n = snprintf(req, sizeof(req), "CONNECT localhost:%d HTTP/1.1\r\n\r\n",
			 ntohs(server->sin_port));
	(void)!write(fd, req, (size_t)n);
	size_t got = 0;
	const size_t want = 39; /* "HTTP/1.1 200 Connection established\r\n\r\n" */
	while (got < want) {
		ssize_t k = read(fd, resp + got, want - got);
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	if (got != want || strncmp(resp, "HTTP/1.1 200", 12) != 0) {
		fprintf(stderr, "bench-net: the proxy refused: %.*s\n", (int)got, resp);
		exit(1);
	}
	return fd;
}

static int64_t one_setup(const struct sockaddr_in *server, const struct sockaddr_in *proxy)
{
	int64_t t0 = cae__now_ns();
	int fd = open_conn(server, proxy);
	char b;
	(void)!write(fd, "p", 1);
	(void)!read(fd, &b, 1);
	int64_t t = cae__now_ns() - t0;
	close(fd);
	return t;
}

/* One download: its speed (MiB/s) and the CPU time per MiB (ms) of the server thread, the
 * client thread and the rest of the process (the proxy's threads, when proxy). */
struct bulk {
	double mbps, server, client, rest, total;
};

static int cmp_double(const void *a, const void *b);

/* The median of one field (at offset off) of b[0..n), sorted in v. */
static double median_of(const struct bulk *b, int n, size_t off, double *v)
{
	for (int i = 0; i < n; i++)
		memcpy(&v[i], (const char *)&b[i] + off, sizeof(double));
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	return v[n / 2];
}

static struct bulk bulk_run(const struct sockaddr_in *server, const struct sockaddr_in *proxy)
{
	int fd = open_conn(server, proxy);
	int64_t p0 = cpu_ns(RUSAGE_SELF), c0 = cpu_ns(RUSAGE_THREAD);
	int64_t t0 = cae__now_ns();
	(void)!write(fd, "b", 1);
	static char buf[1 << 16];
	size_t got = 0;
	for (;;) {
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	double s = (double)(cae__now_ns() - t0) / 1e9;
	int64_t c = cpu_ns(RUSAGE_THREAD) - c0;
	close(fd);
	if (got != BULK) {
		fprintf(stderr, "bench-net: %zu of %u bytes\n", got, BULK);
		exit(1);
	}
	sem_wait(&server_done);
	/* the proxy's thread ends with the connection: wait for it, so that its time counts */
	while (proxy && cae_net_proxy_active(the_proxy) > 0)
		usleep(100);
	int64_t all = cpu_ns(RUSAGE_SELF) - p0;
	double mb = (double)got / (1 << 20);
	return (struct bulk){mb / s, (double)server_cpu / 1e6 / mb, (double)c / 1e6 / mb,
			     (double)(all - server_cpu - c) / 1e6 / mb, (double)all / 1e6 / mb};
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* One download's speed in MiB/s from curl's %{speed_download} on cmd's output; the JSON
 * of `cae exec` (its stdout) when json. 0 on failure. */
static double curl_mbps(const char *cmd, bool json)
{
	FILE *p = popen(cmd, "r");
	char out[8192];
	size_t n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
	out[n] = '\0';
	if (p)
		pclose(p);
	const char *text = out;
	json_t *j = json ? json_loads(out, 0, NULL) : NULL;
	if (json)
		text = json_string_value(json_object_get(j, "stdout"));
	double v = text ? strtod(text, NULL) / (1 << 20) : 0;
	if (v <= 0)
		fprintf(stderr, "bench-net: %s: %s\n", cmd, out);
	json_decref(j);
	return v;
}

/* conn.py PORT N [proxy]: the p50 in ms of N connection set-ups and one round trip to the
 * server, direct or through the proxy's CONNECT on 127.0.0.1:3128 (python on both sides,
 * so that its cost is the same in both figures). */
static const char conn_py[] =
    "import socket, sys, time\n"
    "port, n, proxy = int(sys.argv[1]), int(sys.argv[2]), len(sys.argv) > 3\n"
    "ts = []\n"
    "for i in range(n):\n"
    "    t = time.perf_counter()\n"
    "    s = socket.create_connection(('127.0.0.1', 3128 if proxy else port))\n"
    "    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "    if proxy:\n"
    "        s.sendall(b'CONNECT localhost:%d HTTP/1.1\\r\\n\\r\\n' % port)\n"
    "        h = b''\n"
    "        while not h.endswith(b'\\r\\n\\r\\n'):\n"
    "            h += s.recv(1)\n"
    "    s.sendall(b'p')\n"
    "    assert s.recv(1) == b'k'\n"
    "    s.close()\n"
    "    ts.append(time.perf_counter() - t)\n"
    "ts.sort()\n"
    "print('%.3f' % (ts[n // 2] * 1000))\n";

/* The p50 in ms printed by a conn.py run (through cae exec: json). */
static double conn_ms(const char *cmd, bool json)
{
	return curl_mbps(cmd, json) * (1 << 20);
}

/* The container's path (see the top) on backend ("docker", "kubernetes"): 0, or -1 (said on
 * stderr). */
static int container_bench(const char *build, int port, const char *backend)
{
	char dir[] = "/var/tmp/cae-bench-net-XXXXXX", cmd[4096], env[1200], uuid[64];
	char repo[1200];
	bool k8s = strcmp(backend, "kubernetes") == 0;
	const char *what = k8s ? "kubernetes pod (exec stream)" : "docker container (network none)";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return -1;
	}
	snprintf(uuid, sizeof(uuid), "bench-net-%d", (int)getpid());
	snprintf(env, sizeof(env), "CAE_CONFIG=%s/net.yaml CAE_STATE_DIR=%s/state %s/cae", dir, dir,
		 build);
	/* (the test cluster has no CNI: its pods are on the host's network, as in tests/net) */
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; printf 'command_executor:\n  backend: %s\n  docker:\n"
		 "    network:\n      mode: %s\n      whitelist_mode: true\n"
		 "      allowed_domains: [localhost]\n      allowed_addresses: [127.0.0.1/32]\n"
		 "  kubernetes:\n    namespace: default\n    node_name: localhost\n"
		 "    image_pull_policy: Never\n'"
		 " > net.yaml; git init -q repo; cd repo; echo b > README; git add README; "
		 "git -c user.name=b -c user.email=b@b commit -qm b",
		 dir, backend, k8s ? "host" : "bridge");
	int r = bench_sh(cmd);
	snprintf(cmd, sizeof(cmd), "%s/repo/conn.py", dir);
	FILE *f = r == 0 ? fopen(cmd, "w") : NULL;
	if (!f || fputs(conn_py, f) < 0 || fclose(f) != 0)
		r = -1;
	snprintf(cmd, sizeof(cmd),
		 "cd %s/repo && git add conn.py && git -c user.name=b -c user.email=b@b commit "
		 "-qm conn",
		 dir);
	if (r == 0)
		r = bench_sh(cmd);
	snprintf(repo, sizeof(repo), "%s/repo", dir);
	if (r == 0 && k8s) {
		/* a pod clones over the network only: the loopback git server's public URL */
		snprintf(
		    cmd, sizeof(cmd),
		    "git clone -q --bare %s/repo %s/git/repo.git && scripts/git-server.sh start "
		    "%s/git | sed -n 's/^GIT_HTTP_PUBLIC_URL=//p'",
		    dir, dir, dir);
		FILE *p = popen(cmd, "r");
		char url[512] = "";
		if (!p || !fgets(url, sizeof(url), p))
			r = -1;
		if (p)
			pclose(p);
		url[strcspn(url, "\n")] = '\0';
		snprintf(repo, sizeof(repo), "%srepo.git", url);
	}
	snprintf(cmd, sizeof(cmd), "%s prepare --backend %s --repo %s --uuid %s >%s/prep.json 2>&1",
		 env, backend, repo, uuid, dir);
	if (r != 0 || bench_sh(cmd) != 0) {
		snprintf(cmd, sizeof(cmd), "cat %s/prep.json >&2", dir);
		bench_sh(cmd);
		fprintf(stderr, "bench-net: the %s environment was not prepared\n", backend);
		r = -1;
	}
	double bd[5], bc[5], bs[5];
	for (int i = 0; r == 0 && i < 5; i++) {
		snprintf(cmd, sizeof(cmd),
			 "curl -sS -o /dev/null -w '%%{speed_download}' --noproxy '*' "
			 "http://127.0.0.1:%d/bulk",
			 port);
		bd[i] = curl_mbps(cmd, false);
		/* (NO_PROXY names localhost: --noproxy '' lifts it for this one) */
		snprintf(cmd, sizeof(cmd),
			 "CAE_LOG_LEVEL=debug %s exec --backend %s --uuid %s --timeout 300 -- curl "
			 "-sS -o /dev/null -w '%%{speed_download}' --noproxy '' -p -x "
			 "http://127.0.0.1:3128 http://localhost:%d/bulk 2>>%s/paths.log",
			 env, backend, uuid, port, dir);
		bc[i] = curl_mbps(cmd, true);
		bs[i] = 1;
		if (!k8s) {
			/* the fallback: no handover directory, so the stream's tunnels */
			char mv[1400];
			snprintf(mv, sizeof(mv), "mv %s/state/net/%s %s/state/net/off", dir, uuid,
				 dir);
			bench_sh(mv);
			bs[i] = curl_mbps(cmd, true);
			snprintf(mv, sizeof(mv), "mv %s/state/net/off %s/state/net/%s", dir, dir,
				 uuid);
			bench_sh(mv);
		}
		if (bd[i] <= 0 || bc[i] <= 0 || bs[i] <= 0)
			r = -1;
	}
	if (r == 0) {
		qsort(bd, 5, sizeof(double), cmp_double);
		qsort(bc, 5, sizeof(double), cmp_double);
		qsort(bs, 5, sizeof(double), cmp_double);
		if (k8s)
			printf(
			    "100 MB download by curl (median of 5): on this host direct %.0f "
			    "MiB/s, "
			    "in a %s through the helper's stream and the proxy %.0f MiB/s: %.2fx "
			    "(target >= 0.8x)\n",
			    bd[2], what, bc[2], bc[2] / bd[2]);
		else
			printf(
			    "100 MB download by curl (median of 5): on this host direct %.0f "
			    "MiB/s, "
			    "in a %s through the handed-over listeners and the proxy %.0f MiB/s: "
			    "%.2fx (target >= 0.8x); through the helper's stream instead (the "
			    "fallback) %.0f MiB/s: %.2fx\n",
			    bd[2], what, bc[2], bc[2] / bd[2], bs[2], bs[2] / bd[2]);
		/* each side took the path it measures */
		snprintf(cmd, sizeof(cmd),
			 "cd %s; s=$(grep -c '\"path\":\"socket\"' paths.log); "
			 "t=$(grep -c '\"path\":\"stream\"' paths.log); n=$(grep -c "
			 "'network_path' paths.log); echo \"(paths taken: $s handed over, $t "
			 "stream, of $n)\"; [ \"$s\" = %d ] && [ \"$n\" = %d ]",
			 dir, k8s ? 0 : 5, k8s ? 0 : 5);
		if (bench_sh(cmd) != 0) {
			fprintf(stderr,
				"bench-net: a download did not take the path it measures\n");
			r = -1;
		}
	}
	/* the connection set-up a container's path adds: 300 in one exec, each way */
	double sd[3], sc[3], ss[3];
	for (int i = 0; r == 0 && i < 3; i++) {
		snprintf(cmd, sizeof(cmd), "python3 %s/repo/conn.py %d 300", dir, port);
		sd[i] = conn_ms(cmd, false);
		snprintf(cmd, sizeof(cmd),
			 "%s exec --backend %s --uuid %s --timeout 300 -- python3 conn.py %d "
			 "300 proxy 2>/dev/null",
			 env, backend, uuid, port);
		sc[i] = conn_ms(cmd, true);
		ss[i] = 1;
		if (!k8s) {
			char mv[1400];
			snprintf(mv, sizeof(mv), "mv %s/state/net/%s %s/state/net/off", dir, uuid,
				 dir);
			bench_sh(mv);
			ss[i] = conn_ms(cmd, true);
			snprintf(mv, sizeof(mv), "mv %s/state/net/off %s/state/net/%s", dir, dir,
				 uuid);
			bench_sh(mv);
		}
		if (sd[i] <= 0 || sc[i] <= 0 || ss[i] <= 0)
			r = -1;
	}
	if (r == 0) {
		qsort(sd, 3, sizeof(double), cmp_double);
		qsort(sc, 3, sizeof(double), cmp_double);
		qsort(ss, 3, sizeof(double), cmp_double);
		if (k8s)
			printf(
			    "connection set-up + one round trip from a %s (python, p50 of 300, "
			    "median of 3 runs): on this host direct %.3f ms, through the helper's "
			    "stream and the proxy %.3f ms: adds %.3f ms (target <= 1 ms)\n",
			    what, sd[1], sc[1], sc[1] - sd[1]);
		else
			printf(
			    "connection set-up + one round trip from a %s (python, p50 of 300, "
			    "median of 3 runs): on this host direct %.3f ms, through the "
			    "handed-over listeners and the proxy %.3f ms: adds %.3f ms (target <= "
			    "1 ms); through the helper's stream %.3f ms: adds %.3f ms\n",
			    what, sd[1], sc[1], sc[1] - sd[1], ss[1], ss[1] - sd[1]);
	}
	snprintf(cmd, sizeof(cmd), "%s cleanup --backend %s %s >/dev/null 2>&1", env, backend,
		 uuid);
	bench_sh(cmd);
	if (k8s) {
		snprintf(cmd, sizeof(cmd), "scripts/git-server.sh stop %s/git >/dev/null 2>&1",
			 dir);
		bench_sh(cmd);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	bench_sh(cmd);
	return r;
}

int main(int argc, char **argv)
{
	int rounds = bench_env_int("CAE_BENCH_NET_ROUNDS", 2000);
	struct sockaddr_in server, proxy;
	sem_init(&server_done, 0, 0);
	int sfd = listen_any(&server), pfd = listen_any(&proxy);
	pthread_t t;
	pthread_create(&t, NULL, server_main, (void *)(intptr_t)sfd);
	const char *allowed[] = {"localhost"};
	const char *addrs[] = {"127.0.0.1/32"};
	cae_net_policy_spec spec = {true, allowed, 1, NULL, 0, addrs, 1};
	cae_net_policy *pol;
	cae_net_proxy *px;
	cae_error err = {0};
	if (cae_net_policy_new(&spec, &pol, &err) < 0 ||
	    cae_net_proxy_new(pol, NULL, NULL, &px, &err) < 0 ||
	    cae_net_proxy_listen_fd(px, pfd) < 0) {
		fprintf(stderr, "bench-net: %s\n", err.message);
		return 1;
	}
	the_proxy = px;
	int64_t *direct = calloc((size_t)rounds, sizeof(int64_t));
	int64_t *proxied = calloc((size_t)rounds, sizeof(int64_t));
	/* interleaved, so that both sides see the same machine */
	for (int i = 0; i < rounds; i++) {
		direct[i] = one_setup(&server, NULL);
		proxied[i] = one_setup(&server, &proxy);
	}
	double d = bench_p50_ms(direct, rounds), p = bench_p50_ms(proxied, rounds);
	if (rounds > 0)
		printf("connection set-up + one round trip (p50 of %d): direct %.3f ms, through "
		       "the proxy "
		       "%.3f ms: the proxy adds %.3f ms (target <= 1 ms)\n",
		       rounds, d, p, p - d);
	/* throughput: pairs of downloads, one each way, the order alternating; the median
	 * of the pairs' ratios (each pair saw the same machine) and the CPU time per MiB of
	 * each thread */
	int pairs = bench_env_int("CAE_BENCH_NET_PAIRS", 15);
	if (pairs < 1)
		pairs = 1;
	struct bulk *bd = calloc((size_t)pairs, sizeof(*bd)),
		    *bp = calloc((size_t)pairs, sizeof(*bp));
	double *ratio = calloc((size_t)pairs, sizeof(double));
	double *v = calloc((size_t)pairs, sizeof(double));
	int met = 0;
	for (int i = 0; i < pairs; i++) {
		if (i % 2) {
			bp[i] = bulk_run(&server, &proxy);
			bd[i] = bulk_run(&server, NULL);
		} else {
			bd[i] = bulk_run(&server, NULL);
			bp[i] = bulk_run(&server, &proxy);
		}
		ratio[i] = bp[i].mbps / bd[i].mbps;
		met += ratio[i] >= 0.8;
	}
	double dm = median_of(bd, pairs, offsetof(struct bulk, mbps), v),
	       pm = median_of(bp, pairs, offsetof(struct bulk, mbps), v);
	double ds = median_of(bd, pairs, offsetof(struct bulk, server), v),
	       dc = median_of(bd, pairs, offsetof(struct bulk, client), v),
	       dr = median_of(bd, pairs, offsetof(struct bulk, rest), v);
	double ps = median_of(bp, pairs, offsetof(struct bulk, server), v),
	       pc = median_of(bp, pairs, offsetof(struct bulk, client), v),
	       pr = median_of(bp, pairs, offsetof(struct bulk, rest), v);
	qsort(ratio, (size_t)pairs, sizeof(double), cmp_double);
	printf("100 MB download (%d interleaved pairs): direct %.0f MiB/s, through the proxy %.0f "
	       "MiB/s (medians); ratio per pair median %.2fx, range %.2f-%.2fx, >= 0.8x in %d of "
	       "%d (target >= 0.8x)\n",
	       pairs, dm, pm, ratio[pairs / 2], ratio[0], ratio[pairs - 1], met, pairs);
	double dt = median_of(bd, pairs, offsetof(struct bulk, total), v);
	double pt = median_of(bp, pairs, offsetof(struct bulk, total), v);
	printf("CPU ms per MiB (user+sys, medians): direct: server %.3f, client %.3f, rest %.3f, "
	       "all %.3f; through the proxy: server %.3f, client %.3f, proxy %.3f, all %.3f "
	       "(%.2fx the direct path's CPU)\n",
	       ds, dc, dr, dt, ps, pc, pr, pt, pt / dt);
	free(bd);
	free(bp);
	free(ratio);
	free(v);
	free(direct);
	free(proxied);
	int r = 0;
	if (argc > 1 && bench_env_int("CAE_BENCH_NET_DOCKER", 0)) {
		bench_use_static_helper(argv[1]);
		r = container_bench(argv[1], ntohs(server.sin_port), "docker");
	}
	if (argc > 1 && r == 0 && bench_env_int("CAE_BENCH_NET_K8S", 0)) {
		bench_use_static_helper(argv[1]);
		r = container_bench(argv[1], ntohs(server.sin_port), "kubernetes");
	}
	cae_net_proxy_free(px);
	return r < 0 ? 1 : 0;
}
