/* Fuzz target for the text editor's MCP client (cae_editor_mcp): arbitrary bytes as what an
 * MCP text-editor server writes on its stdout.
 *
 * The input is split at "\xff\xff" into chunks. One text_editor call runs (a view, or a
 * str_replace when the input's first byte is odd); a feeder thread reads the client's
 * requests from the pipe that stands for the server's stdin and answers each request
 * (initialize, tools/list, tools/call: ids 1, 2, 3) with the next chunk, fed in pieces of
 * 1 to 64 bytes taken from the chunk's own length; with no chunk left, or no request 50 ms
 * after a chunk, it says the server is gone, so a call never waits for its timeout. The call must
 * end with a result whose text is valid UTF-8, or with an error. */
#include "cae/editor.h"

#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct feeder {
	cae_editor_mcp *client;
	int out_fd; /* the client's requests */
	const uint8_t *data;
	size_t size, off;
};

/* The next chunk of the input (NULL when none is left). */
static const uint8_t *next_chunk(struct feeder *f, size_t *len)
{
	if (f->off > f->size)
		return NULL;
	const uint8_t *start = f->data + f->off;
	size_t left = f->size - f->off;
	const uint8_t *sep = left >= 2 ? memmem(start, left, "\xff\xff", 2) : NULL;
	*len = sep ? (size_t)(sep - start) : left;
	f->off += *len + 2;
	return start;
}

static void *feed_main(void *arg)
{
	struct feeder *f = arg;
	char buf[4096];
	size_t have = 0;
	bool fed = false;
	for (;;) {
		/* a chunk that did not answer leaves the call waiting: the server "ends" when
		 * no request follows soon (then the call fails with -EPIPE, never a timeout) */
		struct pollfd pfd = {.fd = f->out_fd, .events = POLLIN};
		if (fed && poll(&pfd, 1, 50) == 0)
			break;
		ssize_t n = read(f->out_fd, buf + have, sizeof(buf) - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		char *nl;
		bool gone = false;
		while ((nl = memchr(buf, '\n', have))) {
			size_t line = (size_t)(nl - buf) + 1;
			/* requests carry a method and an id; the initialized notification has
			 * no id, the client's answer to a ping no method */
			bool request = memmem(buf, line, "\"id\":", 5) != NULL &&
				       memmem(buf, line, "\"method\":", 9) != NULL;
			memmove(buf, buf + line, have - line);
			have -= line;
			if (!request)
				continue;
			size_t len;
			const uint8_t *chunk = next_chunk(f, &len);
			if (!chunk) {
				gone = true;
				break;
			}
			size_t piece = len % 64 + 1;
			for (size_t off = 0; off < len; off += piece)
				cae_editor_mcp_feed(f->client, (const char *)chunk + off,
						    len - off < piece ? len - off : piece);
			fed = true;
			if (f->off > f->size)
				gone = true; /* that was the last: the server ends */
			if (gone)
				break;
		}
		if (gone || have == sizeof(buf))
			break;
	}
	cae_editor_mcp_closed(f->client, "the test server ended");
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		abort();
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.max_file_bytes = 4096;
	lim.max_output_chars = 512;
	cae_editor_mcp_options o = {.in_fd = p[1],
				    .tool = "text_editor",
				    .display_root = "/workspace/project",
				    .limits = &lim,
				    .timeout_ms = 60000};
	cae_error err = {0};
	cae_editor_mcp *c = cae_editor_mcp_new(&o, &err);
	if (!c)
		abort();
	struct feeder f = {.client = c, .out_fd = p[0], .data = data, .size = size};
	pthread_t t;
	if (pthread_create(&t, NULL, feed_main, &f) != 0)
		abort();
	json_t *args = size && (data[0] & 1)
			   ? json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path",
				       "a.txt", "old_str", "a", "new_str", "b")
			   : json_pack("{s:s, s:s}", "command", "view", "path", "src/a.txt");
	cae_editor_result res;
	int r = cae_editor_mcp_call(c, args, -1, &res, &err);
	if (r == 0 && (!res.text || !cae__utf8_is_valid(res.text, strlen(res.text))))
		abort();
	if (r == 0)
		cae_editor_result_clear(&res);
	else if (r != -EPIPE && r != -EPROTO && r != -ENOENT && r != -ENOMEM)
		abort(); /* never a timeout: the feeder always answers or ends */
	json_decref(args);
	/* the client no longer writes: the feeder sees the end of its requests */
	close(p[1]);
	pthread_join(t, NULL);
	close(p[0]);
	cae_editor_mcp_free(c);
	return 0;
}
