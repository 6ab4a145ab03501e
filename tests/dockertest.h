/* What the tests that talk to a real Docker engine share: the test image, names unique to
 * one test run ("caetest-<runner pid>-..."), a client that fails loudly when no engine
 * answers, and a fixture (sweep) that removes whatever a run left behind. Call
 * dt_init() first thing in main. */
#ifndef CAE_TESTS_DOCKERTEST_H
#define CAE_TESTS_DOCKERTEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cae/docker.h"
#include "docker/docker-internal.h"
#include "testutil.h"

static inline const char *test_image(void)
{
	const char *s = getenv("CAE_TEST_IMAGE");
	return s && *s ? s : "coding-agent-executor-python:latest";
}

__attribute__((unused)) static int runner_pid; /* set by dt_init */
__attribute__((unused)) static int name_seq;

/* A fresh name unique to this test run. */
static inline void unique_name(char *buf, size_t size, const char *what)
{
	snprintf(buf, size, "caetest-%d-%d-%d-%s", runner_pid, (int)getpid(), ++name_seq, what);
}

static inline cae_docker *client(void)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	int r = cae_docker_new(getenv("DOCKER_HOST"), &d, &err);
	ck_assert_msg(r == 0, "cae_docker_new: %s", err.message);
	r = cae_docker_ping(d, 5000, &err);
	ck_assert_msg(r == 0,
		      "no Docker engine answers (%s); start one with scripts/docker-env.sh up",
		      err.message);
	return d;
}

static inline void dt_init(void)
{
	runner_pid = (int)getpid();
}

static inline void remove_container(cae_docker *d, const char *id)
{
	cae_error err = {0};
	int r = cae_docker_container_remove(d, id, true, true, &err);
	ck_assert_msg(r == 0 || r == -ENOENT, "remove: %s", err.message);
}

/* Removes every container this test run made (by name), also after failed tests. */
static inline void sweep(void)
{
	cae_docker *d = NULL;
	if (cae_docker_new(getenv("DOCKER_HOST"), &d, NULL) < 0)
		return;
	char pat[64];
	snprintf(pat, sizeof(pat), "caetest-%d-", runner_pid);
	json_t *filters = json_pack("{s:[s]}", "name", pat);
	json_t *list = NULL;
	if (cae_docker_container_list(d, true, filters, &list, NULL) == 0) {
		size_t i;
		json_t *c;
		json_array_foreach(list, i, c)
		{
			const char *cid = json_string_value(json_object_get(c, "Id"));
			if (cid)
				cae_docker_container_remove(d, cid, true, true, NULL);
		}
	}
	json_decref(list);
	json_decref(filters);
	cae_docker_free(d);
}

/* The container's processes (GET /containers/{id}/top) as JSON text; free it. */
static inline char *top_text(cae_docker *d, const char *id)
{
	char path[256];
	snprintf(path, sizeof(path), "/containers/%s/top?ps_args=-eo%%20pid,args", id);
	json_t *j = NULL;
	cae_error err = {0};
	int r = cae_docker_call(d, "GET", path, NULL, &j, &err);
	ck_assert_msg(r >= 0, "top: %s", err.message);
	char *s = json_dumps(json_object_get(j, "Processes"), 0);
	json_decref(j);
	return s;
}

/* Waits until `sleep 30` runs in the container. */
static inline void wait_for_sleep(cae_docker *d, const char *id)
{
	for (int i = 0; i < 600; i++) {
		char *top = top_text(d, id);
		bool seen = strstr(top, "sleep 30") != NULL;
		free(top);
		if (seen)
			return;
		nanosleep(&(struct timespec){0, 50000000L}, NULL);
	}
	ck_abort_msg("sleep 30 never started");
}

/* A TCP listener on 127.0.0.1 relaying each connection to the engine's unix socket (with
 * half-closes passed on), so that tcp:// DOCKER_HOST is exercised against the real engine. */
struct relay {
	int lfd;
	int port;
	char sock[108];
};

static inline void relay_pair(int a, int b)
{
	char buf[65536];
	bool a_open = true, b_open = true;
	while (a_open || b_open) {
		struct pollfd p[2] = {{.fd = a_open ? a : -1, .events = POLLIN},
				      {.fd = b_open ? b : -1, .events = POLLIN}};
		if (poll(p, 2, -1) <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (!p[i].revents)
				continue;
			int from = i ? b : a, to = i ? a : b;
			ssize_t n = read(from, buf, sizeof(buf));
			if (n <= 0) {
				shutdown(to, SHUT_WR);
				if (i)
					b_open = false;
				else
					a_open = false;
				continue;
			}
			if (write(to, buf, (size_t)n) != n)
				return;
		}
	}
}

/* A relay process for the engine at $DOCKER_HOST (a unix socket): listens on 127.0.0.1 and
 * serves each connection in a child. Writes "tcp://127.0.0.1:PORT" to host; returns the
 * relay's pid (kill it with SIGKILL; its children end with their connections). */
static inline pid_t dt_tcp_relay(char *host, size_t size)
{
	cae_docker_endpoint ep;
	if (cae__docker_endpoint_parse(getenv("DOCKER_HOST"), &ep, NULL) < 0 || !ep.is_unix) {
		fprintf(stderr, "dt_tcp_relay: DOCKER_HOST is not a unix socket\n");
		exit(2);
	}
	struct relay rl = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
	snprintf(rl.sock, sizeof(rl.sock), "%s", ep.socket_path);
	cae__docker_endpoint_clear(&ep);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	if (bind(rl.lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(rl.lfd, 64) < 0 ||
	    getsockname(rl.lfd, (struct sockaddr *)&sin, &sl) < 0) {
		perror("dt_tcp_relay");
		exit(2);
	}
	snprintf(host, size, "tcp://127.0.0.1:%d", ntohs(sin.sin_port));
	pid_t pid = fork();
	if (pid != 0) {
		close(rl.lfd);
		return pid;
	}
	signal(SIGCHLD, SIG_IGN);
	for (;;) {
		int c = accept(rl.lfd, NULL, NULL);
		if (c < 0)
			_exit(0);
		if (fork() == 0) {
			int u = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un sa = {.sun_family = AF_UNIX};
			memcpy(sa.sun_path, rl.sock, sizeof(rl.sock));
			if (connect(u, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				relay_pair(c, u);
			_exit(0);
		}
		close(c);
	}
}

#endif
