/* The Kubernetes client against the real single-node cluster (scripts/k8s-env.sh up; run with
 * CAE_TEST_K8S=1 and its KUBECONFIG, else skipped): pods made, listed by label, read,
 * deleted; exec over WebSocket with stdout, stderr, exit codes, stdin, arguments that no
 * shell may reinterpret, a long-lived stream, a long stdin held in a bounded queue, streams
 * open at once (one closed while the other goes on: the overlap that once leaked OpenSSL's
 * objects, which the sanitizer build's leak check would report), and the errors of a pod
 * that is not there.
 * Pods are named after this process and deleted with no grace, whatever the outcome. */
#include "testutil.h"

#include "base/fs.h"
#include "cae/k8s.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#if defined(__SANITIZE_ADDRESS__)
/* the sanitizer runtime's (GCC installs no header for it) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#define NS "default"

static cae_k8s *k;
static char pod[96];

static const char *image(void)
{
	const char *s = getenv("CAE_TEST_K8S_IMAGE");
	return s && *s ? s : "docker.io/library/coding-agent-executor-python:latest";
}

static cae_k8s *client(void)
{
	cae_k8s_auth a;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_auth_load(NULL, NULL, &a, &err) == 0, "%s", err.message);
	cae_k8s *c = NULL;
	ck_assert_msg(cae_k8s_new(&a, &c, &err) == 0, "%s", err.message);
	return c;
}

/* One pod for the whole run: made once, removed by the unchecked teardown. */
static void setup(void)
{
	k = client();
	snprintf(pod, sizeof(pod), "caetest-k8s-%d", (int)getpid());
	json_t *spec = json_pack(
	    "{s:s, s:s, s:{s:s, s:{s:s}}, s:{s:s, s:b, s:b, s:i, s:[{s:s, s:s, s:s, s:[s, s], "
	    "s:{s:i, s:b, s:{s:[s]}}}]}}",
	    "apiVersion", "v1", "kind", "Pod", "metadata", "name", pod, "labels", "cae-test",
	    "live", "spec", "nodeName", "localhost", "hostNetwork", 1,
	    "automountServiceAccountToken", 0, "terminationGracePeriodSeconds", 0, "containers",
	    "name", "main", "image", image(), "imagePullPolicy", "Never", "command", "sleep",
	    "infinity", "securityContext", "runAsUser", 1000, "allowPrivilegeEscalation", 0,
	    "capabilities", "drop", "ALL");
	ck_assert_ptr_nonnull(spec);
	cae_error err = {0};
	int r = cae_k8s_pod_create(k, NS, spec, NULL, &err);
	json_decref(spec);
	ck_assert_msg(r == 0, "%s", err.message);
	r = cae_k8s_pod_wait(k, NS, pod, cae_k8s_pod_running, NULL, 120000, NULL, &err);
	ck_assert_msg(r == 0, "%s", err.message);
}

static void teardown(void)
{
	if (k)
		(void)cae_k8s_pod_delete(k, NS, pod, 0, NULL);
	cae_k8s_free(k);
	k = NULL;
}

static cae_run_result run(const char *const *argv, const char *in, size_t in_len)
{
	cae_run_result res;
	cae_error err = {0};
	int r = cae_k8s_exec(k, NS, pod, NULL, argv, in, in_len, 60000, 0, 0, -1, &res, &err);
	ck_assert_msg(r == 0, "%s", err.message);
	return res;
}

START_TEST(pods_by_label)
{
	json_t *items = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_k8s_pod_list(k, NS, "cae-test=live", &items, &err), 0);
	bool found = false;
	size_t i;
	json_t *p;
	json_array_foreach(items, i, p) found |=
	    strcmp(json_string_value(json_object_get(json_object_get(p, "metadata"), "name")),
		   pod) == 0;
	ck_assert(found);
	json_decref(items);
	ck_assert_int_eq(cae_k8s_pod_list(k, NS, "cae-test=nothing-has-this", &items, &err), 0);
	ck_assert_uint_eq(json_array_size(items), 0);
	json_decref(items);
	json_t *got = NULL;
	ck_assert_int_eq(cae_k8s_pod_get(k, NS, "caetest-no-such-pod", &got, &err), -ENOENT);
	ck_assert_int_eq(cae_k8s_pod_delete(k, NS, "caetest-no-such-pod", 0, &err), -ENOENT);
	/* a name that would change the path must not reach another resource */
	ck_assert_int_lt(cae_k8s_pod_get(k, NS, "../../nodes/localhost", &got, &err), 0);
	ck_assert_ptr_null(got);
}
END_TEST

START_TEST(exec_outputs_and_exit_codes)
{
	const char *a1[] = {"sh", "-c", "echo out; echo err >&2; exit 7", NULL};
	cae_run_result res = run(a1, NULL, 0);
	ck_assert_int_eq(res.exit_code, 7);
	ck_assert_str_eq(res.out, "out\n");
	ck_assert_str_eq(res.err, "err\n");
	cae_run_result_clear(&res);

	const char *a2[] = {"true", NULL};
	res = run(a2, NULL, 0);
	ck_assert_int_eq(res.exit_code, 0);
	ck_assert_uint_eq(res.out_len, 0);
	cae_run_result_clear(&res);

	/* arguments arrive as given: nothing re-splits or expands them */
	const char *a3[] = {"printf", "%s|", "a b;$(id)&c", "'\"", "é\n", NULL};
	res = run(a3, NULL, 0);
	ck_assert_str_eq(res.out, "a b;$(id)&c|'\"|é\n|");
	cae_run_result_clear(&res);

	/* stdin: v4 cannot end it, so the command reads exactly what was sent */
	const char *a4[] = {"head", "-c", "11", NULL};
	res = run(a4, "hello world", 11);
	ck_assert_str_eq(res.out, "hello world");
	cae_run_result_clear(&res);

	/* output past the cap is cut and counted */
	const char *a5[] = {"sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x", NULL};
	cae_error err = {0};
	ck_assert_int_eq(
	    cae_k8s_exec(k, NS, pod, NULL, a5, NULL, 0, 60000, 1000, 0, -1, &res, &err), 0);
	ck_assert(res.out_truncated);
	ck_assert_uint_eq(res.out_total, 300000);
	ck_assert_uint_le(res.out_len, 1000);
	cae_run_result_clear(&res);
}
END_TEST

START_TEST(exec_failures)
{
	cae_run_result res;
	cae_error err = {0};
	const char *a[] = {"true", NULL};
	ck_assert_int_eq(cae_k8s_exec(k, NS, "caetest-no-such-pod", NULL, a, NULL, 0, 30000, 0, 0,
				      -1, &res, &err),
			 -ESRCH);
	/* a program that does not exist: the status says it could not run */
	const char *b[] = {"/no/such/program", NULL};
	ck_assert_int_eq(cae_k8s_exec(k, NS, pod, NULL, b, NULL, 0, 30000, 0, 0, -1, &res, &err),
			 -EIO);
	/* a deadline ends the wait */
	const char *c[] = {"sleep", "30", NULL};
	ck_assert_int_eq(cae_k8s_exec(k, NS, pod, NULL, c, NULL, 0, 500, 0, 0, -1, &res, &err), 0);
	ck_assert(res.timed_out);
	cae_run_result_clear(&res);
}
END_TEST

/* Reads s's stdout into buf (of size cap) until at least n bytes came: how many did. */
static size_t read_at_least(cae_k8s_stream *s, char *buf, size_t cap, size_t n)
{
	size_t have = 0;
	while (have < n) {
		struct pollfd p = {.fd = cae_k8s_stream_fd(s), .events = POLLIN};
		ck_assert_int_eq(poll(&p, 1, 30000), 1);
		ssize_t r = cae_k8s_stream_read(s, buf + have, cap - have);
		if (r == -EAGAIN)
			continue;
		ck_assert_int_gt(r, 0);
		have += (size_t)r;
	}
	return have;
}

/* A long-lived stream: many round trips through cat on one exec. */
START_TEST(stream_round_trips)
{
	const char *argv[] = {"cat", NULL};
	cae_k8s_stream *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_exec_open(k, NS, pod, NULL, argv, 30000, &s, &err) == 0, "%s",
		      err.message);
	ck_assert(strcmp(cae_k8s_stream_protocol(s), "v4.channel.k8s.io") == 0 ||
		  strcmp(cae_k8s_stream_protocol(s), "v5.channel.k8s.io") == 0);
	for (int i = 0; i < 50; i++) {
		char msg[64], got[64];
		int n = snprintf(msg, sizeof(msg), "line %d\n", i);
		ck_assert_int_eq(cae_k8s_stream_write(s, msg, (size_t)n), 0);
		read_at_least(s, got, sizeof(got), (size_t)n);
		ck_assert_mem_eq(got, msg, (size_t)n);
	}
	/* a large write arrives whole */
	size_t big = 1 << 20;
	char *data = malloc(big), *back = malloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (char)('a' + i % 26);
	ck_assert_int_eq(cae_k8s_stream_write(s, data, big), 0);
	read_at_least(s, back, big, big);
	ck_assert_mem_eq(back, data, big);
	free(data);
	free(back);
	cae_k8s_stream_close(s);
}
END_TEST

/* Reads exactly msg from s's stdout. */
static void expect(cae_k8s_stream *s, const char *msg)
{
	size_t n = strlen(msg);
	char got[256];
	ck_assert_uint_lt(n, sizeof(got));
	ck_assert_uint_eq(read_at_least(s, got, sizeof(got), n), n);
	ck_assert_mem_eq(got, msg, n);
}

/* Sends msg through s (running cat) and checks that it comes back whole. */
static void echo_through(cae_k8s_stream *s, const char *msg)
{
	ck_assert_int_eq(cae_k8s_stream_write(s, msg, strlen(msg)), 0);
	expect(s, msg);
}

/* Streams open at once share the process's one connection machinery: each keeps its own
 * bytes, and closing one leaves the other working, with one-shot execs coming and going
 * meanwhile; after both are closed a new stream starts afresh. */
START_TEST(streams_overlap)
{
	const char *argv[] = {"cat", NULL};
	cae_k8s_stream *a = NULL, *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_exec_open(k, NS, pod, NULL, argv, 30000, &a, &err) == 0, "%s",
		      err.message);
	ck_assert_msg(cae_k8s_exec_open(k, NS, pod, NULL, argv, 30000, &b, &err) == 0, "%s",
		      err.message);
	ck_assert_int_ne(cae_k8s_stream_fd(a), cae_k8s_stream_fd(b));
	for (int i = 0; i < 10; i++) {
		char ma[64], mb[64];
		snprintf(ma, sizeof(ma), "a says %d\n", i);
		snprintf(mb, sizeof(mb), "b says %d, a longer line\n", i);
		echo_through(a, ma);
		echo_through(b, mb);
	}
	/* bytes written to one never show up on the other */
	ck_assert_int_eq(cae_k8s_stream_write(a, "only a\n", 7), 0);
	echo_through(b, "only b\n");
	expect(a, "only a\n");
	char rest[64];
	ck_assert_int_eq(cae_k8s_stream_read(b, rest, sizeof(rest)), -EAGAIN);

	const char *t[] = {"sh", "-c", "echo one-shot", NULL};
	cae_run_result res = run(t, NULL, 0);
	ck_assert_str_eq(res.out, "one-shot\n");
	cae_run_result_clear(&res);

	cae_k8s_stream_close(a);
	for (int i = 0; i < 10; i++)
		echo_through(b, "b after a closed\n");
	res = run(t, NULL, 0);
	ck_assert_str_eq(res.out, "one-shot\n");
	cae_run_result_clear(&res);
	echo_through(b, "b after another exec\n");
	cae_k8s_stream_close(b);

	/* nothing open now: the next stream works as the first did */
	ck_assert_msg(cae_k8s_exec_open(k, NS, pod, NULL, argv, 30000, &a, &err) == 0, "%s",
		      err.message);
	echo_through(a, "afresh\n");
	cae_k8s_stream_close(a);
}
END_TEST

/* The bytes this process has allocated now (the sanitizer's allocator's count in the
 * sanitizer build, whose quarantine keeps freed memory resident, so that resident memory
 * would not say what is in use). */
static size_t heap_in_use(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
#endif
}

/* A long stdin (a restore streams a whole archive in, hundreds of MB) arrives whole, and the
 * stream keeps only a bounded queue of it meanwhile (the heap in use, sampled after every
 * write, never grows by 40 MiB), however much goes through: what is sent leaves its memory
 * (before, the queue's buffer grew with every byte written until the queue happened to be
 * empty, which a writer that keeps up never lets happen: a 1 GB restore held up to 1 GB). */
START_TEST(long_stdin_bounded)
{
	const size_t total = 96u << 20, piece = 256u << 10;
	char size[32];
	snprintf(size, sizeof(size), "%zu", total);
	const char *argv[] = {"sh", "-c", "head -c \"$1\" | wc -c", "long-stdin", size, NULL};
	cae_k8s_stream *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_exec_open(k, NS, pod, NULL, argv, 30000, &s, &err) == 0, "%s",
		      err.message);
	char *data = malloc(piece);
	ck_assert_ptr_nonnull(data);
	memset(data, 'x', piece);
	size_t before = heap_in_use(), most = 0;
	for (size_t sent = 0; sent < total; sent += piece) {
		ck_assert_int_eq(cae_k8s_stream_write(s, data, piece), 0);
		size_t now = heap_in_use();
		if (now > before && now - before > most)
			most = now - before;
	}
	char out[64];
	size_t n = 0;
	for (;;) {
		struct pollfd p = {.fd = cae_k8s_stream_fd(s), .events = POLLIN};
		ck_assert_int_eq(poll(&p, 1, 60000), 1);
		ssize_t r = cae_k8s_stream_read(s, out + n, sizeof(out) - 1 - n);
		if (r == -EAGAIN)
			continue;
		ck_assert_int_ge(r, 0);
		if (r == 0)
			break;
		n += (size_t)r;
	}
	out[n] = '\0';
	ck_assert_uint_eq(strtoull(out, NULL, 10), total);
	int code = -1;
	ck_assert_int_eq(cae_k8s_stream_status(s, &code, &err), 0);
	ck_assert_int_eq(code, 0);
	cae_k8s_stream_close(s);
	free(data);
	/* the queue holds at most a few MiB (twice its bound): far less than what went through */
	ck_assert_msg(most < (40u << 20), "the stream held up to %zu KiB for %zu MiB of stdin",
		      most >> 10, total >> 20);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("k8s-live");
	TCase *tc = tcase_create("live");
	tcase_set_timeout(tc, 300);
	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_add_test(tc, pods_by_label);
	tcase_add_test(tc, exec_outputs_and_exit_codes);
	tcase_add_test(tc, exec_failures);
	tcase_add_test(tc, stream_round_trips);
	tcase_add_test(tc, streams_overlap);
	tcase_add_test(tc, long_stdin_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	const char *on = getenv("CAE_TEST_K8S");
	if (!on || strcmp(on, "1") != 0) {
		fprintf(stderr, "CAE_TEST_K8S is not 1: no cluster to test against (skipped)\n");
		return 77;
	}
	return tu_run(make_suite());
}
