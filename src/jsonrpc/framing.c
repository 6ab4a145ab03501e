/* Newline-delimited framing with a bounded line length. */
#include "cae/jsonrpc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

#define READ_CHUNK ((size_t)64 << 10)

struct cae_jsonrpc_framer {
	char *buf; /* pending bytes are buf[start, end) */
	size_t start;
	size_t end;
	size_t cap;
	size_t scanned; /* bytes from start known to hold no newline */
	size_t max_line;
	bool discarding; /* inside an oversized line: skip to its newline */
};

/* Most bytes ever pending: one maximal line, its newline, and one read's worth. */
static size_t framer_limit(const cae_jsonrpc_framer *f)
{
	return f->max_line + 1 + READ_CHUNK;
}

cae_jsonrpc_framer *cae_jsonrpc_framer_new(size_t max_line)
{
	cae_jsonrpc_framer *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->max_line = max_line ? max_line : CAE_JSONRPC_DEFAULT_MAX_MESSAGE;
	return f;
}

void cae_jsonrpc_framer_free(cae_jsonrpc_framer *f)
{
	if (!f)
		return;
	free(f->buf);
	free(f);
}

/* Moves pending bytes to the front and makes room for n more (n within the limit). */
static int framer_reserve(cae_jsonrpc_framer *f, size_t n)
{
	if (f->start > 0) {
		memmove(f->buf, f->buf + f->start, f->end - f->start);
		f->end -= f->start;
		f->start = 0;
	}
	size_t need = f->end + n + 1; /* + NUL written over a newline or at the end */
	if (need <= f->cap)
		return 0;
	size_t cap = f->cap ? f->cap : 4096;
	while (cap < need)
		cap *= 2;
	if (cap > framer_limit(f) + 1)
		cap = framer_limit(f) + 1;
	char *p = realloc(f->buf, cap);
	if (!p)
		return -ENOMEM;
	f->buf = p;
	f->cap = cap;
	return 0;
}

long cae_jsonrpc_framer_feed(cae_jsonrpc_framer *f, const void *data, size_t n)
{
	size_t pending = f->end - f->start;
	size_t room = framer_limit(f) > pending ? framer_limit(f) - pending : 0;
	if (n > room)
		n = room;
	if (n == 0)
		return 0;
	int r = framer_reserve(f, n);
	if (r < 0)
		return r;
	memcpy(f->buf + f->end, data, n);
	f->end += n;
	return (long)n;
}

long cae_jsonrpc_framer_read(cae_jsonrpc_framer *f, int fd)
{
	size_t pending = f->end - f->start;
	size_t room = framer_limit(f) > pending ? framer_limit(f) - pending : 0;
	if (room > READ_CHUNK)
		room = READ_CHUNK;
	if (room == 0)
		return -ENOBUFS; /* the caller did not drain with _next first */
	int r = framer_reserve(f, room);
	if (r < 0)
		return r;
	for (;;) {
		ssize_t k = read(fd, f->buf + f->end, room);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		f->end += (size_t)k;
		return (long)k;
	}
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

/* Hands out buf[start, start+n) as a line and moves past it and its terminator. */
static int take_line(cae_jsonrpc_framer *f, size_t n, size_t skip, const char **line, size_t *len)
{
	char *s = f->buf + f->start;
	f->start += n + skip;
	f->scanned = 0;
	if (n > f->max_line)
		return -E2BIG;
	if (n > 0 && s[n - 1] == '\r')
		n--;
	s[n] = '\0';
	*line = s;
	*len = n;
	return 1;
}

int cae_jsonrpc_framer_next(cae_jsonrpc_framer *f, const char **line, size_t *len)
{
	for (;;) {
		size_t pending = f->end - f->start;
		if (pending == 0) {
			f->start = f->end = f->scanned = 0;
			return 0;
		}
		char *s = f->buf + f->start;
		char *nl = memchr(s + f->scanned, '\n', pending - f->scanned);
		if (f->discarding) {
			if (!nl) {
				f->start = f->end = f->scanned = 0;
				return 0;
			}
			f->start += (size_t)(nl - s) + 1;
			f->scanned = 0;
			f->discarding = false;
			continue;
		}
		if (!nl) {
			f->scanned = pending;
			if (pending > f->max_line) {
				/* Too long already: drop it now and skip the rest of it later. */
				f->discarding = true;
				f->start = f->end = f->scanned = 0;
				return -E2BIG;
			}
			return 0;
		}
		size_t n = (size_t)(nl - s);
		if (n <= f->max_line && blank(s, n)) {
			f->start += n + 1;
			f->scanned = 0;
			continue;
		}
		return take_line(f, n, 1, line, len);
	}
}

int cae_jsonrpc_framer_finish(cae_jsonrpc_framer *f, const char **line, size_t *len)
{
	int r = cae_jsonrpc_framer_next(f, line, len);
	if (r != 0)
		return r;
	if (f->discarding) {
		f->discarding = false;
		f->start = f->end = f->scanned = 0;
		return 0;
	}
	size_t pending = f->end - f->start;
	if (pending == 0 || blank(f->buf + f->start, pending)) {
		f->start = f->end = f->scanned = 0;
		return 0;
	}
	/* There is always room for the NUL: framer_reserve keeps one spare byte. */
	return take_line(f, pending, 0, line, len);
}
