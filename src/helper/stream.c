/* cae-helper --stream: the helper side of the multiplexed channel (mux.h). The manager
 * starts it with one Engine API exec and keeps that exec's stdin and stdout open: every
 * request is a frame on stdin, every answer a frame on stdout, and any number run at once
 * (one thread each, with the runner's semantics). End of file on stdin (the manager closed
 * the stream or died) cancels every command, and the helper exits: nothing it started is
 * left. While connected it tells PID 1 (cae-helper --init) that a manager is there. */
#include "helper/mux.h"
#include "helper/tun.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/editor.h"
#include "cae/helper.h"
#include "runner/proctree.h"
#include "worker/fs-serve.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <limits.h>
#include <unistd.h>

#include "base/banned.h"

#define MAX_PIDS 4096
#define NET_ENV_MAX 16
#define END_WAIT_MS 3000

/* A request being served: its cancel pipe, and for a live run its command's stdin (-1:
 * none, or ended) and its signal pipe (-1: none). */
struct sreq {
	struct sreq *next;
	uint32_t id;
	int cancel_w;
	int stdin_w;
	int signal_w;
};

/* A credential request waiting for the manager's reply. */
struct cred {
	struct cred *next;
	uint32_t id;
	bool done;
	char *reply;
	size_t len;
};

struct stream {
	int out;
	cae_wk_fs_table fs; /* the patch worker's file systems */
	/* git's credential requests: a socket commands reach through CAE_CREDENTIAL_SOCKET */
	int cred_fd;
	char cred_dir[64];
	uint32_t cred_next;
	struct cred *creds; /* under lock, signalled on cond */
	/* what every command gets added to its environment: the credential variables, then the
	 * network's (NET_LISTEN) */
	const char *env[6 + NET_ENV_MAX + 1];
	char env_store[6][PATH_MAX + 64];
	char *net_env; /* the network's strings, NUL-separated */
	cae_tun_set *tun;
	int net_fd[2];	 /* the loopback listeners (-1: none) */
	int net_stop[2]; /* a pipe: closing its write end ends the accepting thread */
	int net_hand;	 /* the handover's connection, until acknowledged or refused (-1) */
	pthread_t net_thread;
	bool net_started;
	pthread_mutex_t ed_lock; /* the editor below */
	cae_editor *ed;		 /* opened on the first edit, for ed_root */
	char *ed_root;
	pthread_mutex_t wlock; /* one frame at a time on out */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sreq *reqs;
	int running;
	bool broken; /* out failed: the manager is gone */
};

struct job {
	struct stream *st;
	char type; /* CAE_MUX_RUN, CAE_MUX_RUN_LIVE, CAE_MUX_EDIT or CAE_MUX_FS */
	uint32_t id;
	char *body;
	size_t len;
	int cancel_r;
	int stdin_r;  /* a live run's stdin; -1 otherwise */
	int signal_r; /* a live run's signals; -1 otherwise */
};

static int send_frame(struct stream *st, char type, uint32_t id, const void *p, size_t n)
{
	unsigned char h[CAE_MUX_HEADER];
	cae__mux_header(h, type, id, (uint32_t)n);
	pthread_mutex_lock(&st->wlock);
	int r = st->broken ? -EPIPE : cae__write_all(st->out, h, sizeof(h));
	if (r == 0 && n)
		r = cae__write_all(st->out, p, n);
	pthread_mutex_unlock(&st->wlock);
	if (r < 0) {
		pthread_mutex_lock(&st->lock);
		st->broken = true;
		pthread_cond_broadcast(&st->cond);
		pthread_mutex_unlock(&st->lock);
	}
	return r;
}

static bool job_ack(void *ud)
{
	struct job *j = ud;
	return send_frame(j->st, CAE_MUX_ACK, j->id, NULL, 0) == 0;
}

/* One edit: the editor of the stream (one workspace: a request for another root reopens it)
 * runs what the manager checked; undo history lives as long as the stream. */
static int handle_edit(struct stream *st, const char *body, size_t len, cae_buf *out)
{
	cae_error err = {0};
	cae_helper_edit e;
	cae_editor_result res = {0};
	int status = cae__helper_decode_edit(body, len, &e, &err);
	if (status == 0) {
		pthread_mutex_lock(&st->ed_lock);
		if (!st->ed || strcmp(st->ed_root, e.root) != 0) {
			cae_editor_free(st->ed);
			free(st->ed_root);
			st->ed_root = strdup(e.root);
			st->ed =
			    st->ed_root ? cae_editor_new(e.root, e.root, &e.limits, &err) : NULL;
		}
		status =
		    st->ed ? cae_editor_run(st->ed, &e.req, &res) : (err.code ? err.code : -ENOMEM);
		pthread_mutex_unlock(&st->ed_lock);
		cae__helper_edit_clear(&e);
	}
	int r = cae__helper_encode_edit_result(status, err.message, &res, out);
	cae_editor_result_clear(&res);
	return r;
}

/* One file operation of the patch worker, with the code a local host uses (fs-host.c). */
static int handle_fs(struct stream *st, const char *body, size_t len, cae_buf *out)
{
	cae_error err = {0};
	cae_helper_fs f;
	cae_fs_reply rep = {0};
	int status = cae__helper_decode_fs(body, len, &f, &err);
	if (status == 0) {
		status = cae__wk_fs_serve(&st->fs, "", NULL, &f.q, &rep, &err);
		cae__helper_fs_clear(&f);
	}
	int r = cae__helper_encode_fs_result(status, err.message, &rep, out);
	cae_fs_reply_clear(&rep);
	return r;
}

/* A live run's output, as the command writes it: OUTPUT frames of at most 64 KiB. */
static void job_output(void *ud, int stream, const char *data, size_t len)
{
	struct job *j = ud;
	char buf[65536];
	while (len) {
		size_t n = MIN(len, sizeof(buf) - 1);
		buf[0] = (char)stream;
		memcpy(buf + 1, data, n);
		if (send_frame(j->st, CAE_MUX_OUTPUT, j->id, buf, n + 1) < 0)
			return;
		data += n;
		len -= n;
	}
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct stream *st = j->st;
	cae_buf out;
	cae__buf_init(&out, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	if (j->type == CAE_MUX_FS) {
		if (handle_fs(st, j->body, j->len, &out) == 0)
			(void)send_frame(st, CAE_MUX_FS_RESULT, j->id,
					 out.data + CAE_HELPER_FRAME_HEADER,
					 out.len - CAE_HELPER_FRAME_HEADER);
	} else if (j->type == CAE_MUX_EDIT) {
		if (handle_edit(st, j->body, j->len, &out) == 0)
			(void)send_frame(st, CAE_MUX_EDIT_RESULT, j->id,
					 out.data + CAE_HELPER_FRAME_HEADER,
					 out.len - CAE_HELPER_FRAME_HEADER);
	} else if (cae__helper_handle_request(j->body, j->len, j->cancel_r,
					      j->type == CAE_MUX_RUN_LIVE
						  ? &(cae_live_io){.output = job_output,
								   .ud = j,
								   .stdin_fd = j->stdin_r,
								   .signal_fd = j->signal_r}
						  : NULL,
					      job_ack, j, st->env, &out) == 0) {
		(void)send_frame(st, CAE_MUX_RESULT, j->id, out.data + CAE_HELPER_FRAME_HEADER,
				 out.len - CAE_HELPER_FRAME_HEADER);
	}
	cae__buf_clear(&out);
	pthread_mutex_lock(&st->lock);
	for (struct sreq **p = &st->reqs; *p; p = &(*p)->next) {
		if ((*p)->id == j->id) {
			struct sreq *r = *p;
			*p = r->next;
			close(r->cancel_w);
			if (r->stdin_w >= 0)
				close(r->stdin_w);
			if (r->signal_w >= 0)
				close(r->signal_w);
			free(r);
			break;
		}
	}
	st->running--;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	close(j->cancel_r);
	if (j->stdin_r >= 0)
		close(j->stdin_r);
	if (j->signal_r >= 0)
		close(j->signal_r);
	free(j->body);
	free(j);
	return NULL;
}

static int start_job(struct stream *st, char type, uint32_t id, char *body, size_t len)
{
	int p[2] = {-1, -1}, in[2] = {-1, -1}, sg[2] = {-1, -1};
	struct job *j = calloc(1, sizeof(*j));
	struct sreq *r = calloc(1, sizeof(*r));
	if (!j || !r || pipe2(p, O_CLOEXEC) < 0 ||
	    (type == CAE_MUX_RUN_LIVE &&
	     (pipe2(in, O_CLOEXEC) < 0 || pipe2(sg, O_CLOEXEC | O_NONBLOCK) < 0))) {
		for (int i = 0; i < 2; i++) {
			if (p[i] >= 0)
				close(p[i]);
			if (in[i] >= 0)
				close(in[i]);
			if (sg[i] >= 0)
				close(sg[i]);
		}
		free(j);
		free(r);
		free(body);
		return -ENOMEM;
	}
	if (in[1] >= 0) {
		(void)fcntl(in[1], F_SETPIPE_SZ, (int)CAE_MUX_STDIN_BUFFER);
		(void)fcntl(in[1], F_SETFL, O_NONBLOCK);
	}
	*j = (struct job){.st = st,
			  .type = type,
			  .id = id,
			  .body = body,
			  .len = len,
			  .cancel_r = p[0],
			  .stdin_r = in[0],
			  .signal_r = sg[0]};
	*r = (struct sreq){.id = id, .cancel_w = p[1], .stdin_w = in[1], .signal_w = sg[1]};
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_mutex_lock(&st->lock);
	r->next = st->reqs;
	st->reqs = r;
	st->running++;
	pthread_t t;
	int e = pthread_create(&t, &attr, job_main, j);
	if (e != 0) {
		st->reqs = r->next;
		st->running--;
	}
	pthread_mutex_unlock(&st->lock);
	pthread_attr_destroy(&attr);
	if (e != 0) {
		close(p[0]);
		close(p[1]);
		if (in[0] >= 0) {
			close(in[0]);
			close(in[1]);
		}
		free(r);
		free(j->body);
		free(j);
		return -EAGAIN;
	}
	return 0;
}

/* A live run's input: written without blocking the channel (what does not fit in the
 * command's pipe is dropped); an empty frame ends it. */
static void feed_stdin(struct stream *st, uint32_t id, const char *p, size_t n)
{
	pthread_mutex_lock(&st->lock);
	for (struct sreq *r = st->reqs; r; r = r->next) {
		if (r->id != id || r->stdin_w < 0)
			continue;
		while (n) {
			ssize_t w = write(r->stdin_w, p, n);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			p += w;
			n -= (size_t)w;
		}
		if (n || p == NULL) {
			close(r->stdin_w);
			r->stdin_w = -1;
		}
		break;
	}
	pthread_mutex_unlock(&st->lock);
}

/* Signals for request id's command (a byte each), into its signal pipe; a full pipe drops
 * them (the command is not reading its signals: it has hundreds waiting). */
static void send_signals(struct stream *st, uint32_t id, const char *p, size_t n)
{
	pthread_mutex_lock(&st->lock);
	for (struct sreq *r = st->reqs; r; r = r->next)
		if (r->id == id && r->signal_w >= 0)
			(void)!write(r->signal_w, p, n);
	pthread_mutex_unlock(&st->lock);
}

static void cancel(struct stream *st, uint32_t id, bool all)
{
	pthread_mutex_lock(&st->lock);
	for (struct sreq *r = st->reqs; r; r = r->next)
		if (all || r->id == id)
			(void)!write(r->cancel_w, "c", 1);
	pthread_mutex_unlock(&st->lock);
}

/* At the end: whatever still runs below us, with its descendants, is killed. */
static void kill_descendants(void)
{
	pid_t *pids = malloc(MAX_PIDS * sizeof(pid_t));
	if (!pids)
		return;
	for (int round = 0; round < 10; round++) {
		size_t n = cae__proctree_descendants(getpid(), pids, MAX_PIDS);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			kill(pids[i], SIGKILL);
		nanosleep(&(struct timespec){0, 5 * 1000000L}, NULL);
	}
	free(pids);
}

#define CRED_MAX 65536
#define CRED_WAIT_MS 30000

/* One connection of `cae-helper --credential`: its request goes to the manager, the reply
 * comes back. */
static void *cred_conn_main(void *arg)
{
	struct stream *st = ((void **)arg)[0];
	int fd = (int)(intptr_t)((void **)arg)[1];
	free(arg);
	char *req = malloc(CRED_MAX);
	size_t n = 0;
	while (req && n < CRED_MAX) {
		ssize_t k = read(fd, req + n, CRED_MAX - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	struct cred c = {0};
	pthread_mutex_lock(&st->lock);
	c.id = 0x80000000u | (st->cred_next++ & 0x7fffffffu);
	c.next = st->creds;
	st->creds = &c;
	pthread_mutex_unlock(&st->lock);
	if (req && send_frame(st, CAE_MUX_CREDENTIAL, c.id, req, n) == 0) {
		int64_t deadline = cae__now_ns() + CRED_WAIT_MS * 1000000LL;
		pthread_mutex_lock(&st->lock);
		while (!c.done && !st->broken && cae__now_ns() < deadline) {
			struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
			pthread_cond_timedwait(&st->cond, &st->lock, &ts);
		}
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_lock(&st->lock);
	for (struct cred **p = &st->creds; *p; p = &(*p)->next)
		if (*p == &c) {
			*p = c.next;
			break;
		}
	pthread_mutex_unlock(&st->lock);
	if (c.reply)
		(void)cae__write_all(fd, c.reply, c.len);
	free(c.reply);
	free(req);
	close(fd);
	return NULL;
}

static void *cred_accept_main(void *arg)
{
	struct stream *st = arg;
	for (;;) {
		int fd = accept4(st->cred_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		void **a = malloc(2 * sizeof(void *));
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (a) {
			a[0] = st;
			a[1] = (void *)(intptr_t)fd;
		}
		if (!a || pthread_create(&t, &attr, cred_conn_main, a) != 0) {
			free(a);
			close(fd);
		}
		pthread_attr_destroy(&attr);
	}
}

static void cred_reply(struct stream *st, uint32_t id, char *body, size_t n)
{
	pthread_mutex_lock(&st->lock);
	for (struct cred *c = st->creds; c; c = c->next) {
		if (c->id == id && !c->done) {
			c->done = true;
			c->reply = body;
			c->len = n;
			body = NULL;
			break;
		}
	}
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	free(body);
}

/* The credential socket (a private directory under /tmp: commands run as our user and may
 * reach it; nothing else can), and the environment that points git at it. Without it,
 * commands just get no credentials. */
static void cred_setup(struct stream *st)
{
	st->cred_fd = -1;
	snprintf(st->cred_dir, sizeof(st->cred_dir), "/tmp/cae-cred-XXXXXX");
	if (!mkdtemp(st->cred_dir)) {
		st->cred_dir[0] = '\0';
		return;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", st->cred_dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	st->cred_fd = fd;
	char self[PATH_MAX];
	ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (k <= 0)
		return;
	self[k] = '\0';
	snprintf(st->env_store[0], sizeof(st->env_store[0]), "CAE_CREDENTIAL_SOCKET=%s",
		 sa.sun_path);
	snprintf(st->env_store[1], sizeof(st->env_store[1]), "GIT_CONFIG_COUNT=2");
	snprintf(st->env_store[2], sizeof(st->env_store[2]), "GIT_CONFIG_KEY_0=credential.helper");
	snprintf(st->env_store[3], sizeof(st->env_store[3]), "GIT_CONFIG_VALUE_0=");
	snprintf(st->env_store[4], sizeof(st->env_store[4]), "GIT_CONFIG_KEY_1=credential.helper");
	/* after the empty value's reset of the list: ours is the only helper, whatever the
	 * repository's configuration names */
	snprintf(st->env_store[5], sizeof(st->env_store[5]), "GIT_CONFIG_VALUE_1=!%s --credential",
		 self);
	for (int i = 0; i < 6; i++)
		st->env[i] = st->env_store[i];
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	(void)pthread_create(&t, &attr, cred_accept_main, st);
	pthread_attr_destroy(&attr);
}

static void cred_cleanup(struct stream *st)
{
	if (st->cred_dir[0]) {
		char p[160];
		snprintf(p, sizeof(p), "%s/s", st->cred_dir);
		unlink(p);
		rmdir(st->cred_dir);
	}
}

int cae__helper_credential_main(int argc, char **argv)
{
	/* git calls "get", "store" and "erase": only get asks for anything */
	if (argc < 3 || strcmp(argv[2], "get") != 0)
		return 0;
	const char *path = getenv("CAE_CREDENTIAL_SOCKET");
	if (!path || !*path) {
		fprintf(stderr, "cae: no token is configured for this repository's host "
				"(github.token or gitlab.token in cae's configuration)\n");
		return 0;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "cae: the credential channel is gone: %s\n", strerror(errno));
		return 0;
	}
	char buf[CRED_MAX];
	size_t n = 0;
	ssize_t k;
	while (n < sizeof(buf) && (k = read(0, buf + n, sizeof(buf) - n)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		n += (size_t)k;
	}
	if (cae__write_all(fd, buf, n) < 0)
		return 0;
	shutdown(fd, SHUT_WR);
	n = 0;
	while (n < sizeof(buf) - 1 && (k = read(fd, buf + n, sizeof(buf) - 1 - n)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			break;
		n += (size_t)k;
	}
	close(fd);
	if (n == 0) {
		fprintf(stderr, "cae: no token is configured for this repository's host "
				"(github.token or gitlab.token in cae's configuration)\n");
		return 0;
	}
	return cae__write_all(1, buf, n) < 0 ? 1 : 0;
}

static int tun_send(void *ud, char type, uint32_t id, const void *p, size_t n)
{
	return send_frame(ud, type, id, p, n);
}

/* Accepts on the loopback listeners; each connection is a tunnel to the manager's proxy.
 * Ends when the manager acknowledges the listeners' handover: it accepts on them itself. */
static void *net_accept_main(void *arg)
{
	struct stream *st = arg;
	for (;;) {
		struct pollfd p[4] = {{.fd = st->net_stop[0], .events = POLLIN},
				      {.fd = st->net_fd[0], .events = POLLIN},
				      {.fd = st->net_fd[1], .events = POLLIN},
				      {.fd = st->net_hand, .events = POLLIN}};
		if (poll(p, 4, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[0].revents)
			return NULL;
		if (p[3].revents) {
			char ack = 0;
			bool taken = read(st->net_hand, &ack, 1) == 1 && ack == 'k';
			close(st->net_hand);
			st->net_hand = -1;
			if (taken) {
				for (int i = 0; i < 2; i++) {
					close(st->net_fd[i]);
					st->net_fd[i] = -1;
				}
				return NULL;
			}
		}
		for (int i = 0; i < 2; i++) {
			if (!(p[i + 1].revents & POLLIN))
				continue;
			int fd = accept4(st->net_fd[i], NULL, NULL, SOCK_CLOEXEC);
			if (fd < 0)
				continue;
			char kind = i == 0 ? 'h' : 's';
			(void)cae__tun_start(st->tun, cae__tun_next_id(st->tun), fd,
					     CAE_MUX_TUN_OPEN, &kind, 1);
		}
	}
}

/* NET_LISTEN: the listeners, the accepting thread, and the variables every command gets
 * (only once the listeners are there: a port some other process holds gets no command
 * pointed at it); after an empty string, the manager's handover socket and token
 * (net-handover.h), to which the listeners are sent at once. The same port twice: one
 * listener, without SO_REUSEPORT, which no other socket can then share (on a node's
 * network, another pod's process of the same uid could otherwise take some of its
 * connections). Returns 0 or -errno. */
static int net_listen(struct stream *st, const char *body, size_t n)
{
	if (st->net_started)
		return -EALREADY;
	if (n < 4 || !st->tun)
		return -EINVAL;
	const unsigned char *b = (const unsigned char *)body;
	int ports[2] = {b[0] | b[1] << 8, b[2] | b[3] << 8};
	bool exclusive = ports[0] == ports[1];
	size_t env_len = n - 4;
	free(st->net_env);
	st->net_env = malloc(env_len + 1);
	if (!st->net_env)
		return -ENOMEM;
	memcpy(st->net_env, body + 4, env_len);
	st->net_env[env_len] = '\0';
	const char *add[NET_ENV_MAX];
	int na = 0;
	size_t off = 0;
	while (off < env_len) {
		const char *e = st->net_env + off;
		size_t l = strlen(e);
		off += l + 1;
		if (l == 0)
			break;
		if (strchr(e, '=') && na < NET_ENV_MAX)
			add[na++] = e;
	}
	const char *hand_path = off < env_len ? st->net_env + off : NULL;
	const char *hand_token = NULL;
	if (hand_path) {
		off += strlen(hand_path) + 1;
		hand_token = off < env_len ? st->net_env + off : NULL;
	}
	st->net_fd[1] = -1;
	for (int i = 0; i < (exclusive ? 1 : 2); i++) {
		st->net_fd[i] = cae__helper_listen_loopback(ports[i], !exclusive);
		if (st->net_fd[i] < 0) {
			int e = st->net_fd[i];
			if (i == 1)
				close(st->net_fd[0]);
			st->net_fd[0] = st->net_fd[1] = -1;
			return e;
		}
	}
	/* no manager there (a remote engine, no mount): the tunnels below */
	st->net_hand =
	    hand_token && !exclusive
		? cae__helper_net_handover(hand_path, hand_token, st->net_fd[0], st->net_fd[1])
		: -1;
	if (st->net_hand < 0)
		st->net_hand = -1;
	if (pipe2(st->net_stop, O_CLOEXEC) < 0 ||
	    pthread_create(&st->net_thread, NULL, net_accept_main, st) != 0) {
		for (int i = 0; i < 2; i++) {
			if (st->net_fd[i] >= 0)
				close(st->net_fd[i]);
			st->net_fd[i] = -1;
		}
		if (st->net_hand >= 0)
			close(st->net_hand);
		st->net_hand = -1;
		return -EAGAIN;
	}
	int k = 0;
	while (st->env[k])
		k++;
	for (int i = 0; i < na && k < 6 + NET_ENV_MAX; i++)
		st->env[k++] = add[i];
	st->net_started = true;
	return 0;
}

/* TUN_CONNECT: a tunnel to 127.0.0.1:port here; a refused one is closed at once. */
static void tun_connect(struct stream *st, uint32_t id, const char *body, size_t n)
{
	const unsigned char *b = (const unsigned char *)body;
	int port = n == 2 ? (b[0] | b[1] << 8) : 0;
	int fd = port > 0 ? socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		fd = -1;
	}
	if (fd < 0 || !st->tun || cae__tun_start(st->tun, id, fd, 0, NULL, 0) < 0)
		(void)send_frame(st, CAE_MUX_TUN_CLOSE, id, NULL, 0);
}

static void net_end(struct stream *st)
{
	if (st->net_started) {
		close(st->net_stop[1]);
		pthread_join(st->net_thread, NULL);
		close(st->net_stop[0]);
		for (int i = 0; i < 2; i++)
			if (st->net_fd[i] >= 0)
				close(st->net_fd[i]);
		if (st->net_hand >= 0)
			close(st->net_hand);
	}
	cae__tun_set_free(st->tun);
	st->tun = NULL;
	free(st->net_env);
}

int cae__helper_serve_stream(int in, int out, int heartbeat_s, bool embedded)
{
	cae__proctree_init();
	struct stream st = {.out = out, .cred_fd = -1, .net_fd = {-1, -1}, .net_hand = -1};
	pthread_mutex_init(&st.ed_lock, NULL);
	cae__wk_fs_table_init(&st.fs);
	pthread_mutex_init(&st.wlock, NULL);
	pthread_mutex_init(&st.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st.cond, &ca);
	pthread_condattr_destroy(&ca);
	if (!embedded)
		cred_setup(&st);
	st.tun = cae__tun_set_new(tun_send, &st, 0x80000000u);

	char hello[32];
	int hl = snprintf(hello, sizeof(hello), "cae-helper %d", CAE_HELPER_PROTOCOL);
	int ret = send_frame(&st, CAE_MUX_HELLO, 0, hello, (size_t)hl);
	if (heartbeat_s > 0)
		kill(1, SIGUSR1);
	int64_t next_beat = cae__now_ns() + (int64_t)heartbeat_s * 1000000000LL;
	while (ret == 0) {
		struct pollfd pfd = {.fd = in, .events = POLLIN};
		int tmo = heartbeat_s > 0 ? cae__poll_timeout_ms(next_beat, cae__now_ns()) : -1;
		int pr = poll(&pfd, 1, tmo);
		if (pr < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (heartbeat_s > 0 && cae__now_ns() >= next_beat) {
			kill(1, SIGUSR1);
			next_beat = cae__now_ns() + (int64_t)heartbeat_s * 1000000000LL;
		}
		if (pr <= 0)
			continue;
		unsigned char h[CAE_MUX_HEADER];
		int r = cae__read_exact(in, h, sizeof(h));
		if (r < 0) {
			ret = r == -EPIPE ? 0 : r;
			break;
		}
		char type;
		uint32_t id, n;
		if (cae__mux_parse_header(h, &type, &id, &n) < 0) {
			ret = -EPROTO;
			break;
		}
		/* (a tunnel's data in a reused buffer: tun.c) */
		char *body = type == CAE_MUX_TUN_DATA && st.tun ? cae__tun_body(st.tun, n)
								: malloc(n ? n : 1);
		if (!body) {
			ret = -ENOMEM;
			break;
		}
		r = cae__read_exact(in, body, n);
		if (r < 0) {
			free(body);
			ret = r == -EPIPE ? 0 : r;
			break;
		}
		switch (type) {
		case CAE_MUX_FS:
			if (start_job(&st, CAE_MUX_FS, id, body, n) < 0) {
				cae_buf e;
				cae__buf_init(&e, 4096);
				if (cae__helper_encode_fs_result(-EAGAIN,
								 "cae-helper: cannot start a "
								 "thread",
								 NULL, &e) == 0)
					(void)send_frame(&st, CAE_MUX_FS_RESULT, id,
							 e.data + CAE_HELPER_FRAME_HEADER,
							 e.len - CAE_HELPER_FRAME_HEADER);
				cae__buf_clear(&e);
			}
			break;
		case CAE_MUX_EDIT:
			if (start_job(&st, CAE_MUX_EDIT, id, body, n) < 0) {
				cae_buf e;
				cae__buf_init(&e, 4096);
				if (cae__helper_encode_edit_result(-EAGAIN,
								   "cae-helper: cannot start "
								   "a thread",
								   NULL, &e) == 0)
					(void)send_frame(&st, CAE_MUX_EDIT_RESULT, id,
							 e.data + CAE_HELPER_FRAME_HEADER,
							 e.len - CAE_HELPER_FRAME_HEADER);
				cae__buf_clear(&e);
			}
			break;
		case CAE_MUX_STDIN:
			feed_stdin(&st, id, n ? body : NULL, n);
			free(body);
			break;
		case CAE_MUX_RUN:
		case CAE_MUX_RUN_LIVE:
			if (start_job(&st, type, id, body, n) < 0) {
				cae_buf e;
				cae__buf_init(&e, 4096);
				if (cae__helper_encode_response(-EAGAIN,
								"cae-helper: cannot start "
								"a thread",
								NULL, &e) == 0) {
					(void)send_frame(&st, CAE_MUX_ACK, id, NULL, 0);
					(void)send_frame(&st, CAE_MUX_RESULT, id,
							 e.data + CAE_HELPER_FRAME_HEADER,
							 e.len - CAE_HELPER_FRAME_HEADER);
				}
				cae__buf_clear(&e);
			}
			break;
		case CAE_MUX_SIGNAL:
			send_signals(&st, id, body, n);
			free(body);
			break;
		case CAE_MUX_CANCEL:
			cancel(&st, id, false);
			free(body);
			break;
		case CAE_MUX_CREDENTIAL_REPLY:
			cred_reply(&st, id, body, n);
			break;
		case CAE_MUX_PING:
			(void)send_frame(&st, CAE_MUX_PONG, id, NULL, 0);
			free(body);
			break;
		case CAE_MUX_NET_LISTEN: {
			int32_t v = net_listen(&st, body, n);
			unsigned char a[4] = {(unsigned char)v, (unsigned char)(v >> 8),
					      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
			(void)send_frame(&st, CAE_MUX_NET_READY, id, a, sizeof(a));
			free(body);
			break;
		}
		case CAE_MUX_TUN_CONNECT:
			tun_connect(&st, id, body, n);
			free(body);
			break;
		case CAE_MUX_TUN_DATA:
			if (st.tun)
				cae__tun_frame_body(st.tun, type, id, body, n);
			else
				free(body);
			break;
		case CAE_MUX_TUN_WINDOW:
		case CAE_MUX_TUN_CLOSE:
			if (st.tun)
				cae__tun_frame(st.tun, type, id, body, n);
			else
				free(body);
			break;
		default:
			free(body); /* a newer manager's frame */
		}
	}
	/* The manager is gone (or broke the protocol): every command and connection ends. */
	net_end(&st);
	cancel(&st, 0, true);
	pthread_mutex_lock(&st.lock);
	int64_t deadline = cae__now_ns() + END_WAIT_MS * 1000000LL;
	/* Embedded, the process goes on: every job must be gone before st is (each command's
	 * runner ends its tree on the cancel within its grace period); the descendants of the
	 * process are other streams' and commands' too. */
	while (st.running > 0 && (embedded || cae__now_ns() < deadline)) {
		struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
		pthread_cond_timedwait(&st.cond, &st.lock, &ts);
		if (embedded)
			deadline = cae__now_ns() + END_WAIT_MS * 1000000LL;
	}
	pthread_mutex_unlock(&st.lock);
	if (!embedded)
		kill_descendants();
	cred_cleanup(&st);
	/* open transactions are dropped (their journal's recovery would do it otherwise) */
	cae__wk_fs_table_clear(&st.fs);
	return ret;
}
