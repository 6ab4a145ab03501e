#include "helper/proto.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/banned.h"

enum {
	/* request */
	RQ_ARGV = 1,	/* repeated */
	RQ_ENV = 2,	/* repeated */
	RQ_ENV_SET = 3, /* present: envp is the ENV list (possibly empty) */
	RQ_CWD = 4,
	RQ_STDIN = 5, /* present: has_stdin */
	RQ_TIMEOUT_MS = 6,
	RQ_GRACE_MS = 7,
	RQ_DRAIN_MS = 8,
	RQ_MAX_STDOUT = 9,
	RQ_MAX_STDERR = 10,
	RQ_TRUNCATE = 11,
	RQ_ENV_ADD = 12, /* repeated */
	RQ_CONFINE = 13,
	/* response */
	RS_STATUS = 1,
	RS_MESSAGE = 2,
	RS_EXIT = 3,
	RS_SIGNAL = 4,
	RS_FLAGS = 5,
	RS_OUT = 6,
	RS_OUT_TOTAL = 7,
	RS_ERR = 8,
	RS_ERR_TOTAL = 9,
	RS_DURATION_US = 10,
};

enum { F_TIMED_OUT = 1, F_CANCELLED = 2, F_OUT_TRUNC = 4, F_ERR_TRUNC = 8 };

static void put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t cae__helper_frame_length(const unsigned char header[CAE_HELPER_FRAME_HEADER])
{
	return get_u32(header);
}

static int put_field(cae_buf *b, int tag, const void *data, size_t len)
{
	if (len > UINT32_MAX)
		return -E2BIG;
	unsigned char h[5];
	h[0] = (unsigned char)tag;
	put_u32(h + 1, (uint32_t)len);
	int r = cae__buf_append(b, h, sizeof(h));
	if (r == 0 && len)
		r = cae__buf_append(b, data, len);
	return r;
}

static int put_str(cae_buf *b, int tag, const char *s)
{
	return put_field(b, tag, s, strlen(s));
}

static int put_i64(cae_buf *b, int tag, int64_t v)
{
	unsigned char d[8];
	for (int i = 0; i < 8; i++)
		d[i] = (unsigned char)((uint64_t)v >> (8 * i));
	return put_field(b, tag, d, sizeof(d));
}

static int get_i64(const unsigned char *p, size_t len, int64_t *v)
{
	if (len != 8)
		return -EINVAL;
	uint64_t u = 0;
	for (int i = 0; i < 8; i++)
		u |= (uint64_t)p[i] << (8 * i);
	*v = (int64_t)u;
	return 0;
}

/* Starts a frame: header placeholder + type byte; finish_frame fills the length in. */
static int begin_frame(cae_buf *b, char type, size_t *at)
{
	*at = b->len;
	unsigned char h[5] = {0, 0, 0, 0, (unsigned char)type};
	int r = cae__buf_append(b, h, sizeof(h));
	return r == 0 && b->truncated ? -E2BIG : r;
}

static int finish_frame(cae_buf *b, size_t at, int r)
{
	if (r == 0 && b->truncated)
		r = -E2BIG;
	if (r == 0 && b->len - at - CAE_HELPER_FRAME_HEADER > CAE_HELPER_MAX_FRAME)
		r = -E2BIG;
	if (r == 0)
		put_u32((unsigned char *)b->data + at,
			(uint32_t)(b->len - at - CAE_HELPER_FRAME_HEADER));
	return r;
}

int cae__helper_encode_request(const cae_run_spec *spec, const cae_helper_request_extra *x,
			       cae_buf *b)
{
	if (!spec || !spec->argv || !spec->argv[0])
		return -EINVAL;
	size_t at;
	int r = begin_frame(b, 'Q', &at);
	if (r < 0)
		return r;
	for (const char *const *a = spec->argv; *a && r == 0; a++)
		r = put_str(b, RQ_ARGV, *a);
	if (spec->envp) {
		for (const char *const *e = spec->envp; *e && r == 0; e++)
			r = put_str(b, RQ_ENV, *e);
		if (r == 0)
			r = put_field(b, RQ_ENV_SET, NULL, 0);
	}
	if (r == 0 && spec->cwd)
		r = put_str(b, RQ_CWD, spec->cwd);
	if (r == 0 && spec->has_stdin)
		r = put_field(b, RQ_STDIN, spec->stdin_data,
			      spec->stdin_data ? spec->stdin_len : 0);
	if (r == 0)
		r = put_i64(b, RQ_TIMEOUT_MS, spec->timeout_ms);
	if (r == 0 && spec->grace_ms)
		r = put_i64(b, RQ_GRACE_MS, spec->grace_ms);
	if (r == 0 && spec->drain_ms)
		r = put_i64(b, RQ_DRAIN_MS, spec->drain_ms);
	if (r == 0 && spec->max_stdout)
		r = put_i64(b, RQ_MAX_STDOUT, (int64_t)spec->max_stdout);
	if (r == 0 && spec->max_stderr)
		r = put_i64(b, RQ_MAX_STDERR, (int64_t)spec->max_stderr);
	if (r == 0 && spec->truncate)
		r = put_i64(b, RQ_TRUNCATE, spec->truncate);
	for (const char *const *e = x ? x->env_add : NULL; e && *e && r == 0; e++)
		r = put_str(b, RQ_ENV_ADD, *e);
	if (r == 0 && x && x->confine)
		r = put_str(b, RQ_CONFINE, x->confine);
	return finish_frame(b, at, r);
}

/* Walks the fields of a body: calls fn for each; stops at the first error. */
typedef int (*field_fn)(void *ud, int tag, const unsigned char *data, size_t len, cae_error *err);

static int walk(const char *body, size_t len, char type, field_fn fn, void *ud, cae_error *err)
{
	const unsigned char *p = (const unsigned char *)body;
	if (len < 1 || p[0] != (unsigned char)type)
		return cae_error_set(err, -EINVAL, "helper message: wrong type");
	size_t off = 1;
	while (off < len) {
		if (len - off < 5)
			return cae_error_set(err, -EINVAL, "helper message: truncated field");
		int tag = p[off];
		size_t fl = get_u32(p + off + 1);
		off += 5;
		if (fl > len - off)
			return cae_error_set(err, -EINVAL, "helper message: field %d overruns",
					     tag);
		int r = fn(ud, tag, p + off, fl, err);
		if (r < 0)
			return r;
		off += fl;
	}
	return 0;
}

struct req_ctx {
	cae_helper_request *req;
	size_t argc, envc, argcap, envcap, addc, addcap;
	bool env_set;
};

static int push(char ***v, size_t *n, size_t *cap, const unsigned char *d, size_t len)
{
	if (*n + 1 >= CAE_HELPER_MAX_ARGS)
		return -E2BIG;
	if (*n + 2 > *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		char **nv = realloc(*v, nc * sizeof(char *));
		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = nc;
	}
	char *s = cae__memdup0(d, len);
	if (!s)
		return -ENOMEM;
	(*v)[(*n)++] = s;
	(*v)[*n] = NULL;
	return 0;
}

static int req_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	struct req_ctx *c = ud;
	cae_helper_request *q = c->req;
	bool text = tag == RQ_ARGV || tag == RQ_ENV || tag == RQ_CWD || tag == RQ_ENV_ADD ||
		    tag == RQ_CONFINE;
	if (text && memchr(d, '\0', len))
		return cae_error_set(err, -EINVAL, "helper request: NUL in field %d", tag);
	int64_t v = 0;
	switch (tag) {
	case RQ_ARGV:
		return push(&q->argv, &c->argc, &c->argcap, d, len) < 0
			   ? cae_error_set(err, -E2BIG, "helper request: argv too long")
			   : 0;
	case RQ_ENV:
		return push(&q->envp, &c->envc, &c->envcap, d, len) < 0
			   ? cae_error_set(err, -E2BIG, "helper request: environment too long")
			   : 0;
	case RQ_ENV_ADD:
		if (!memchr(d, '=', len))
			return cae_error_set(err, -EINVAL,
					     "helper request: environment entry "
					     "without '='");
		return push(&q->env_add, &c->addc, &c->addcap, d, len) < 0
			   ? cae_error_set(err, -E2BIG, "helper request: environment too long")
			   : 0;
	case RQ_CONFINE:
		free(q->confine);
		q->confine = cae__memdup0(d, len);
		return q->confine ? 0 : -ENOMEM;
	case RQ_ENV_SET:
		c->env_set = true;
		return 0;
	case RQ_CWD:
		free(q->cwd);
		q->cwd = cae__memdup0(d, len);
		return q->cwd ? 0 : -ENOMEM;
	case RQ_STDIN:
		free(q->stdin_data);
		q->stdin_data = cae__memdup0(d, len);
		if (!q->stdin_data)
			return -ENOMEM;
		q->spec.has_stdin = true;
		q->spec.stdin_len = len;
		return 0;
	case RQ_TIMEOUT_MS:
	case RQ_GRACE_MS:
	case RQ_DRAIN_MS:
	case RQ_MAX_STDOUT:
	case RQ_MAX_STDERR:
	case RQ_TRUNCATE:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "helper request: bad integer %d", tag);
		break;
	default:
		return 0; /* a newer manager's field */
	}
	if (tag != RQ_TIMEOUT_MS && v < 0)
		return cae_error_set(err, -EINVAL, "helper request: negative field %d", tag);
	switch (tag) {
	case RQ_TIMEOUT_MS:
		q->spec.timeout_ms = v;
		break;
	case RQ_GRACE_MS:
		q->spec.grace_ms = v;
		break;
	case RQ_DRAIN_MS:
		q->spec.drain_ms = v;
		break;
	case RQ_MAX_STDOUT:
		q->spec.max_stdout = (size_t)MIN((uint64_t)v, (uint64_t)SIZE_MAX);
		break;
	case RQ_MAX_STDERR:
		q->spec.max_stderr = (size_t)MIN((uint64_t)v, (uint64_t)SIZE_MAX);
		break;
	default:
		if (v != CAE_TRUNCATE_HEAD && v != CAE_TRUNCATE_HEAD_TAIL)
			return cae_error_set(err, -EINVAL, "helper request: bad truncate mode");
		q->spec.truncate = (cae_truncate_mode)v;
	}
	return 0;
}

static void free_vec(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

void cae__helper_request_clear(cae_helper_request *q)
{
	if (!q)
		return;
	free_vec(q->argv);
	free_vec(q->envp);
	free_vec(q->env_add);
	free(q->cwd);
	free(q->confine);
	free(q->stdin_data);
	memset(q, 0, sizeof(*q));
}

int cae__helper_decode_request(const char *body, size_t len, cae_helper_request *q, cae_error *err)
{
	memset(q, 0, sizeof(*q));
	struct req_ctx c = {.req = q};
	int r = walk(body, len, 'Q', req_field, &c, err);
	if (r == 0 && c.argc == 0)
		r = cae_error_set(err, -EINVAL, "helper request: no command");
	if (r == 0 && c.env_set && !q->envp) {
		q->envp = calloc(1, sizeof(char *));
		if (!q->envp)
			r = -ENOMEM;
	}
	if (r < 0) {
		if (err && err->code == 0)
			cae_error_set(err, r, "helper request: %s", strerror(-r));
		cae__helper_request_clear(q);
		return r;
	}
	if (!c.env_set) {
		free_vec(q->envp);
		q->envp = NULL;
	}
	q->spec.argv = (const char *const *)q->argv;
	q->spec.envp = (const char *const *)q->envp;
	q->spec.cwd = q->cwd;
	q->spec.stdin_data = q->stdin_data;
	q->spec.cancel_fd = -1; /* not sent: the receiver's own */
	return 0;
}

int cae__helper_encode_response(int status, const char *message, const cae_run_result *res,
				cae_buf *b)
{
	size_t at;
	int r = begin_frame(b, 'R', &at);
	if (r < 0)
		return r;
	r = put_i64(b, RS_STATUS, status);
	if (status < 0) {
		if (r == 0)
			r = put_str(b, RS_MESSAGE, message ? message : "");
		return finish_frame(b, at, r);
	}
	int64_t flags = (res->timed_out ? F_TIMED_OUT : 0) | (res->cancelled ? F_CANCELLED : 0) |
			(res->out_truncated ? F_OUT_TRUNC : 0) |
			(res->err_truncated ? F_ERR_TRUNC : 0);
	if (r == 0)
		r = put_i64(b, RS_EXIT, res->exit_code);
	if (r == 0)
		r = put_i64(b, RS_SIGNAL, res->term_signal);
	if (r == 0)
		r = put_i64(b, RS_FLAGS, flags);
	if (r == 0)
		r = put_field(b, RS_OUT, res->out, res->out ? res->out_len : 0);
	if (r == 0)
		r = put_i64(b, RS_OUT_TOTAL, (int64_t)res->out_total);
	if (r == 0)
		r = put_field(b, RS_ERR, res->err, res->err ? res->err_len : 0);
	if (r == 0)
		r = put_i64(b, RS_ERR_TOTAL, (int64_t)res->err_total);
	if (r == 0)
		r = put_i64(b, RS_DURATION_US, res->duration_us);
	return finish_frame(b, at, r);
}

struct resp_ctx {
	int64_t status;
	bool has_status;
	char message[CAE_ERROR_MSG_MAX];
	cae_run_result *res;
};

/* An error message from the other side: valid UTF-8, no NUL, cut to fit dst. */
static int copy_message(char *dst, size_t size, const unsigned char *d, size_t len)
{
	size_t n;
	_cleanup_free_ char *m = cae__utf8_sanitize((const char *)d, MIN(len, 4096), &n);
	if (!m)
		return -ENOMEM;
	n = cae__utf8_floor(m, MIN(n, size - 1));
	for (size_t i = 0; i < n; i++)
		dst[i] = m[i] ? m[i] : ' ';
	dst[n] = '\0';
	return 0;
}

/* Outputs come from inside the sandbox: keep them valid UTF-8 whatever was sent. */
static char *utf8_copy(const unsigned char *d, size_t n, size_t *out_len)
{
	if (cae__utf8_is_valid((const char *)d, n)) {
		*out_len = n;
		return cae__memdup0(d, n);
	}
	return cae__utf8_sanitize((const char *)d, n, out_len);
}

static int resp_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	struct resp_ctx *c = ud;
	cae_run_result *res = c->res;
	int64_t v = 0;
	switch (tag) {
	case RS_MESSAGE:
		return copy_message(c->message, sizeof(c->message), d, len);
	case RS_OUT:
		free(res->out);
		res->out = utf8_copy(d, len, &res->out_len);
		return res->out ? 0 : -ENOMEM;
	case RS_ERR:
		free(res->err);
		res->err = utf8_copy(d, len, &res->err_len);
		return res->err ? 0 : -ENOMEM;
	case RS_STATUS:
	case RS_EXIT:
	case RS_SIGNAL:
	case RS_FLAGS:
	case RS_OUT_TOTAL:
	case RS_ERR_TOTAL:
	case RS_DURATION_US:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "helper response: bad integer %d", tag);
		break;
	default:
		return 0;
	}
	switch (tag) {
	case RS_STATUS:
		if (v > 0 || v < -4095)
			return cae_error_set(err, -EINVAL, "helper response: bad status");
		c->status = v;
		c->has_status = true;
		break;
	case RS_EXIT:
		if (v < 0 || v > 255 + 128)
			return cae_error_set(err, -EINVAL, "helper response: bad exit code");
		res->exit_code = (int)v;
		break;
	case RS_SIGNAL:
		if (v < 0 || v > 128)
			return cae_error_set(err, -EINVAL, "helper response: bad signal");
		res->term_signal = (int)v;
		break;
	case RS_FLAGS:
		res->timed_out = v & F_TIMED_OUT;
		res->cancelled = v & F_CANCELLED;
		res->out_truncated = v & F_OUT_TRUNC;
		res->err_truncated = v & F_ERR_TRUNC;
		break;
	case RS_OUT_TOTAL:
		res->out_total = (uint64_t)v;
		break;
	case RS_ERR_TOTAL:
		res->err_total = (uint64_t)v;
		break;
	default:
		res->duration_us = v < 0 ? 0 : v;
		res->duration_ms = res->duration_us / 1000;
	}
	return 0;
}

int cae__helper_decode_response(const char *body, size_t len, int *status, cae_run_result *res,
				cae_error *err)
{
	memset(res, 0, sizeof(*res));
	struct resp_ctx c = {.res = res};
	int r = walk(body, len, 'R', resp_field, &c, err);
	if (r == 0 && !c.has_status)
		r = cae_error_set(err, -EINVAL, "helper response: no status");
	if (r == 0 && c.status == 0 && (!res->out || !res->err)) {
		/* A result always carries both streams (possibly empty). */
		if (!res->out)
			res->out = calloc(1, 1);
		if (!res->err)
			res->err = calloc(1, 1);
		if (!res->out || !res->err)
			r = -ENOMEM;
	}
	if (r < 0) {
		if (err && err->code == 0)
			cae_error_set(err, r, "helper response: %s", strerror(-r));
		cae_run_result_clear(res);
		return r;
	}
	*status = (int)c.status;
	if (c.status < 0) {
		cae_run_result_clear(res);
		cae_error_set(err, (int)c.status, "%s",
			      c.message[0] ? c.message : strerror((int)-c.status));
	}
	return 0;
}

int cae__helper_send_fd(int ctl, int fd, char kind)
{
	char byte = kind;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ssize_t n;
	do
		n = sendmsg(ctl, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : 0;
}

int cae__helper_recv_fd(int ctl, char *kind)
{
	char byte = 0;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	do
		n = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -EPIPE;
	if (n < 0)
		return -errno;
	*kind = byte;
	int fd = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)(void *)CMSG_DATA(c);
		for (size_t i = 0; i < nfd; i++) {
			if (fd < 0)
				fd = fds[i];
			else
				close(fds[i]); /* one fd per message: close extras */
		}
	}
	return fd;
}

/* ---- edits ---- */

enum {
	ED_ROOT = 1,
	ED_COMMAND = 2,
	ED_PATH = 3,
	ED_TEXT = 4,
	ED_NEW = 5, /* present: new_str given */
	ED_LINE = 6,
	ED_RANGE_START = 7, /* present: view_range given */
	ED_RANGE_END = 8,
	ED_MAX_FILE = 9,
	ED_MAX_OUTPUT = 10,
	ED_UNDO_DEPTH = 11,
	ED_UNDO_BUDGET = 12,
	ED_MAX_DIR = 13,
	/* result */
	EDR_STATUS = 1,
	EDR_MESSAGE = 2,
	EDR_IS_ERROR = 3,
	EDR_TEXT = 4,
	EDR_SUMMARY = 5,
	EDR_PATH = 6,
	EDR_COMMAND = 7,
};

int cae__helper_encode_edit(const char *root, const cae_editor_limits *l,
			    const cae_editor_request *q, cae_buf *b)
{
	size_t at;
	int r = begin_frame(b, 'E', &at);
	if (r == 0)
		r = put_str(b, ED_ROOT, root);
	if (r == 0)
		r = put_i64(b, ED_COMMAND, q->command);
	if (r == 0 && q->path)
		r = put_field(b, ED_PATH, q->path, q->path_len);
	if (r == 0 && q->text)
		r = put_field(b, ED_TEXT, q->text, q->text_len);
	if (r == 0 && q->new_str)
		r = put_field(b, ED_NEW, q->new_str, q->new_len);
	if (r == 0)
		r = put_i64(b, ED_LINE, q->line);
	if (r == 0 && q->has_range)
		r = put_i64(b, ED_RANGE_START, q->range[0]);
	if (r == 0 && q->has_range)
		r = put_i64(b, ED_RANGE_END, q->range[1]);
	if (r == 0)
		r = put_i64(b, ED_MAX_FILE, (int64_t)l->max_file_bytes);
	if (r == 0)
		r = put_i64(b, ED_MAX_OUTPUT, (int64_t)l->max_output_chars);
	if (r == 0)
		r = put_i64(b, ED_UNDO_DEPTH, (int64_t)l->undo_depth);
	if (r == 0)
		r = put_i64(b, ED_UNDO_BUDGET, (int64_t)l->undo_budget_bytes);
	if (r == 0)
		r = put_i64(b, ED_MAX_DIR, (int64_t)l->max_dir_entries);
	return finish_frame(b, at, r);
}

static int set_copy(char **dst, const unsigned char *d, size_t len)
{
	free(*dst);
	*dst = cae__memdup0(d, len);
	return *dst ? 0 : -ENOMEM;
}

static int edit_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	cae_helper_edit *e = ud;
	int64_t v = 0;
	switch (tag) {
	case ED_ROOT:
		if (memchr(d, '\0', len))
			return cae_error_set(err, -EINVAL, "edit request: NUL in the root");
		return set_copy(&e->root, d, len);
	case ED_PATH:
		e->req.path_len = len;
		return set_copy(&e->path, d, len);
	case ED_TEXT:
		e->req.text_len = len;
		return set_copy(&e->text, d, len);
	case ED_NEW:
		e->req.new_len = len;
		return set_copy(&e->new_str, d, len);
	case ED_COMMAND:
	case ED_LINE:
	case ED_RANGE_START:
	case ED_RANGE_END:
	case ED_MAX_FILE:
	case ED_MAX_OUTPUT:
	case ED_UNDO_DEPTH:
	case ED_UNDO_BUDGET:
	case ED_MAX_DIR:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "edit request: bad integer %d", tag);
		break;
	default:
		return 0;
	}
	if (tag >= ED_MAX_FILE && v < 0)
		return cae_error_set(err, -EINVAL, "edit request: negative limit %d", tag);
	switch (tag) {
	case ED_COMMAND:
		if (v < CAE_EDITOR_CMD_VIEW || v > CAE_EDITOR_CMD_UNDO_EDIT)
			return cae_error_set(err, -EINVAL, "edit request: bad command");
		e->req.command = (cae_editor_command)v;
		break;
	case ED_LINE:
		e->req.line = v;
		break;
	case ED_RANGE_START:
		e->req.range[0] = v;
		e->req.has_range = true;
		break;
	case ED_RANGE_END:
		e->req.range[1] = v;
		break;
	case ED_MAX_FILE:
		e->limits.max_file_bytes = (size_t)v;
		break;
	case ED_MAX_OUTPUT:
		e->limits.max_output_chars = (size_t)v;
		break;
	case ED_UNDO_DEPTH:
		e->limits.undo_depth = (unsigned)MIN(v, (int64_t)UINT32_MAX);
		break;
	case ED_UNDO_BUDGET:
		e->limits.undo_budget_bytes = (size_t)v;
		break;
	default:
		e->limits.max_dir_entries = (size_t)v;
	}
	return 0;
}

void cae__helper_edit_clear(cae_helper_edit *e)
{
	if (!e)
		return;
	free(e->root);
	free(e->path);
	free(e->text);
	free(e->new_str);
	memset(e, 0, sizeof(*e));
}

int cae__helper_decode_edit(const char *body, size_t len, cae_helper_edit *e, cae_error *err)
{
	memset(e, 0, sizeof(*e));
	cae_editor_limits_default(&e->limits);
	int r = walk(body, len, 'E', edit_field, e, err);
	if (r == 0 && (!e->root || e->root[0] != '/' || !e->path || !e->req.command))
		r = cae_error_set(err, -EINVAL, "edit request: root, command and path are needed");
	if (r < 0) {
		if (err && err->code == 0)
			cae_error_set(err, r, "edit request: %s", strerror(-r));
		cae__helper_edit_clear(e);
		return r;
	}
	e->req.path = e->path;
	e->req.text = e->text;
	e->req.new_str = e->new_str;
	return 0;
}

int cae__helper_encode_edit_result(int status, const char *message, const cae_editor_result *res,
				   cae_buf *b)
{
	size_t at;
	int r = begin_frame(b, 'e', &at);
	if (r == 0)
		r = put_i64(b, EDR_STATUS, status);
	if (status < 0) {
		if (r == 0)
			r = put_str(b, EDR_MESSAGE, message ? message : "");
		return finish_frame(b, at, r);
	}
	if (r == 0)
		r = put_i64(b, EDR_IS_ERROR, res->is_error);
	if (r == 0)
		r = put_i64(b, EDR_COMMAND, res->command);
	if (r == 0 && res->text)
		r = put_str(b, EDR_TEXT, res->text);
	if (r == 0 && res->summary)
		r = put_str(b, EDR_SUMMARY, res->summary);
	if (r == 0 && res->path)
		r = put_str(b, EDR_PATH, res->path);
	return finish_frame(b, at, r);
}

struct edr_ctx {
	int64_t status;
	bool has_status;
	char message[CAE_ERROR_MSG_MAX];
	cae_editor_result *res;
};

static int edr_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	struct edr_ctx *c = ud;
	cae_editor_result *res = c->res;
	size_t n;
	int64_t v = 0;
	switch (tag) {
	case EDR_MESSAGE:
		return copy_message(c->message, sizeof(c->message), d, len);
	case EDR_TEXT:
		free(res->text);
		res->text = utf8_copy(d, len, &n);
		return res->text ? 0 : -ENOMEM;
	case EDR_SUMMARY:
		free(res->summary);
		res->summary = utf8_copy(d, len, &n);
		return res->summary ? 0 : -ENOMEM;
	case EDR_PATH:
		free(res->path);
		res->path = utf8_copy(d, len, &n);
		return res->path ? 0 : -ENOMEM;
	case EDR_STATUS:
	case EDR_IS_ERROR:
	case EDR_COMMAND:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "edit result: bad integer %d", tag);
		break;
	default:
		return 0;
	}
	if (tag == EDR_STATUS) {
		if (v > 0 || v < -4095)
			return cae_error_set(err, -EINVAL, "edit result: bad status");
		c->status = v;
		c->has_status = true;
	} else if (tag == EDR_IS_ERROR) {
		res->is_error = v != 0;
	} else {
		if (v < CAE_EDITOR_CMD_UNKNOWN || v > CAE_EDITOR_CMD_UNDO_EDIT)
			return cae_error_set(err, -EINVAL, "edit result: bad command");
		res->command = (cae_editor_command)v;
	}
	return 0;
}

int cae__helper_decode_edit_result(const char *body, size_t len, int *status,
				   cae_editor_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	struct edr_ctx c = {.res = res};
	int r = walk(body, len, 'e', edr_field, &c, err);
	if (r == 0 && !c.has_status)
		r = cae_error_set(err, -EINVAL, "edit result: no status");
	if (r == 0 && c.status == 0 && !res->text)
		r = cae_error_set(err, -EINVAL, "edit result: no text");
	if (r < 0) {
		cae_editor_result_clear(res);
		return r;
	}
	*status = (int)c.status;
	if (c.status < 0) {
		cae_editor_result_clear(res);
		cae_error_set(err, (int)c.status, "%s", c.message);
	}
	return 0;
}

/* ---- file operations ---- */

enum {
	FS_OP = 1,
	FS_HANDLE = 2,
	FS_ROOT = 3,
	FS_REL = 4,
	FS_DATA = 5,
	FS_MODE = 6,
	FS_MAX = 7,
	/* result */
	FSR_STATUS = 1,
	FSR_MESSAGE = 2,
	FSR_HANDLE = 3,
	FSR_DATA = 4,
	FSR_MODE = 5,
};

void cae_fs_reply_clear(cae_fs_reply *r)
{
	if (r) {
		free(r->data);
		memset(r, 0, sizeof(*r));
	}
}

int cae__helper_encode_fs(const cae_fs_request *q, cae_buf *b)
{
	size_t at;
	int r = begin_frame(b, 'F', &at);
	if (r == 0)
		r = put_i64(b, FS_OP, q->op);
	if (r == 0)
		r = put_i64(b, FS_HANDLE, q->handle);
	if (r == 0 && q->root)
		r = put_str(b, FS_ROOT, q->root);
	if (r == 0 && q->rel)
		r = put_str(b, FS_REL, q->rel);
	if (r == 0 && q->data)
		r = put_field(b, FS_DATA, q->data, q->len);
	if (r == 0)
		r = put_i64(b, FS_MODE, (int64_t)q->mode);
	if (r == 0)
		r = put_i64(b, FS_MAX, (int64_t)MIN(q->max, (uint64_t)INT64_MAX));
	return finish_frame(b, at, r);
}

static int fs_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	cae_helper_fs *f = ud;
	int64_t v = 0;
	switch (tag) {
	case FS_ROOT:
	case FS_REL:
		if (memchr(d, '\0', len))
			return cae_error_set(err, -EINVAL, "file request: NUL in a path");
		return set_copy(tag == FS_ROOT ? &f->root : &f->rel, d, len);
	case FS_DATA:
		f->q.len = len;
		return set_copy(&f->data, d, len);
	case FS_OP:
	case FS_HANDLE:
	case FS_MODE:
	case FS_MAX:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "file request: bad integer %d", tag);
		break;
	default:
		return 0;
	}
	if (tag == FS_OP) {
		if (v < CAE_FS_OPEN || v > CAE_FS_CLOSE)
			return cae_error_set(err, -EINVAL, "file request: bad operation");
		f->q.op = (cae_fs_op)v;
	} else if (tag == FS_HANDLE) {
		f->q.handle = (uint32_t)v;
	} else if (tag == FS_MODE) {
		f->q.mode = (uint32_t)v;
	} else {
		f->q.max = v < 0 ? 0 : (uint64_t)v;
	}
	return 0;
}

void cae__helper_fs_clear(cae_helper_fs *f)
{
	if (f) {
		free(f->root);
		free(f->rel);
		free(f->data);
		memset(f, 0, sizeof(*f));
	}
}

int cae__helper_decode_fs(const char *body, size_t len, cae_helper_fs *f, cae_error *err)
{
	memset(f, 0, sizeof(*f));
	int r = walk(body, len, 'F', fs_field, f, err);
	if (r == 0 && !f->q.op)
		r = cae_error_set(err, -EINVAL, "file request: no operation");
	if (r < 0) {
		cae__helper_fs_clear(f);
		return r;
	}
	f->q.root = f->root;
	f->q.rel = f->rel;
	f->q.data = f->data;
	return 0;
}

int cae__helper_encode_fs_result(int status, const char *message, const cae_fs_reply *rep,
				 cae_buf *b)
{
	size_t at;
	int r = begin_frame(b, 'f', &at);
	if (r == 0)
		r = put_i64(b, FSR_STATUS, status);
	if (r == 0 && status < 0)
		r = put_str(b, FSR_MESSAGE, message ? message : "");
	if (r == 0 && status == 0 && rep) {
		r = put_i64(b, FSR_HANDLE, rep->handle);
		if (r == 0)
			r = put_i64(b, FSR_MODE, rep->mode);
		if (r == 0 && rep->data)
			r = put_field(b, FSR_DATA, rep->data, rep->len);
	}
	return finish_frame(b, at, r);
}

struct fsr_ctx {
	int64_t status;
	bool has_status;
	char message[CAE_ERROR_MSG_MAX];
	cae_fs_reply *rep;
};

static int fsr_field(void *ud, int tag, const unsigned char *d, size_t len, cae_error *err)
{
	struct fsr_ctx *c = ud;
	int64_t v = 0;
	switch (tag) {
	case FSR_MESSAGE:
		return copy_message(c->message, sizeof(c->message), d, len);
	case FSR_DATA:
		free(c->rep->data);
		c->rep->data = cae__memdup0(d, len);
		c->rep->len = len;
		return c->rep->data ? 0 : -ENOMEM;
	case FSR_STATUS:
	case FSR_HANDLE:
	case FSR_MODE:
		if (get_i64(d, len, &v) < 0)
			return cae_error_set(err, -EINVAL, "file result: bad integer %d", tag);
		break;
	default:
		return 0;
	}
	if (tag == FSR_STATUS) {
		if (v > 0 || v < -4095)
			return cae_error_set(err, -EINVAL, "file result: bad status");
		c->status = v;
		c->has_status = true;
	} else if (tag == FSR_HANDLE) {
		c->rep->handle = (uint32_t)v;
	} else {
		c->rep->mode = (uint32_t)v & 07777;
	}
	return 0;
}

int cae__helper_decode_fs_result(const char *body, size_t len, int *status, cae_fs_reply *rep,
				 cae_error *err)
{
	memset(rep, 0, sizeof(*rep));
	struct fsr_ctx c = {.rep = rep};
	int r = walk(body, len, 'f', fsr_field, &c, err);
	if (r == 0 && !c.has_status)
		r = cae_error_set(err, -EINVAL, "file result: no status");
	if (r < 0) {
		cae_fs_reply_clear(rep);
		return r;
	}
	*status = (int)c.status;
	if (c.status < 0) {
		cae_fs_reply_clear(rep);
		cae_error_set(err, (int)c.status, "%s", c.message);
	}
	return 0;
}
