/* What the tests that talk to a real Docker engine share: the test image, names unique to
 * one test run ("caetest-<runner pid>-..."), a client that fails loudly when no engine
 * answers, and a fixture (sweep) that removes whatever a run left behind. Call
 * dt_init() first thing in main. */
#ifndef CAE_TESTS_DOCKERTEST_H
#define CAE_TESTS_DOCKERTEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cae/docker.h"
#include "testutil.h"

static const char *test_image(void)
{
	const char *s = getenv("CAE_TEST_IMAGE");
	return s && *s ? s : "coding-agent-executor-python:latest";
}

static int runner_pid; /* set by dt_init */
static int name_seq;

/* A fresh name unique to this test run. */
static void unique_name(char *buf, size_t size, const char *what)
{
	snprintf(buf, size, "caetest-%d-%d-%d-%s", runner_pid, (int)getpid(), ++name_seq, what);
}

static cae_docker *client(void)
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

static void dt_init(void)
{
	runner_pid = (int)getpid();
}

static void remove_container(cae_docker *d, const char *id)
{
	cae_error err = {0};
	int r = cae_docker_container_remove(d, id, true, true, &err);
	ck_assert_msg(r == 0 || r == -ENOENT, "remove: %s", err.message);
}

/* Removes every container this test run made (by name), also after failed tests. */
static void sweep(void)
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
static char *top_text(cae_docker *d, const char *id)
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
static void wait_for_sleep(cae_docker *d, const char *id)
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

#endif
