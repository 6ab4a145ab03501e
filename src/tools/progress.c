/* Live output of a long command as MCP progress: when the caller asked for progress, each
 * notification carries the newest lines the command wrote (masked like its result), at most
 * every LIVE_INTERVAL_MS after the first, which goes out as soon as there is output; only
 * whole lines are shown (a secret cut in two would not be masked). The
 * progress value is the number of output bytes so far, so it only increases. The command's
 * result is the same with or without it. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define LIVE_INTERVAL_MS 500
#define LIVE_TAIL 2048	     /* bytes of output kept for the next notification */
#define LIVE_MESSAGE_LINES 5 /* newest lines a notification shows */

static void live_output(void *ud, int stream, const char *data, size_t len)
{
	(void)stream;
	cae__tool_live *l = ud;
	l->total += len;
	/* the newest LIVE_TAIL bytes */
	if (len >= LIVE_TAIL) {
		memcpy(l->tail, data + len - LIVE_TAIL, LIVE_TAIL);
		l->tail_len = LIVE_TAIL;
	} else {
		size_t keep = MIN(l->tail_len, (size_t)LIVE_TAIL - len);
		memmove(l->tail, l->tail + l->tail_len - keep, keep);
		memcpy(l->tail + keep, data, len);
		l->tail_len = keep + len;
	}
	/* the last LIVE_MESSAGE_LINES finished lines (a line still being written may hold the
	 * first part of a secret) */
	size_t end = l->tail_len;
	while (end && l->tail[end - 1] != '\n')
		end--;
	if (end == 0)
		return; /* nothing finished to show yet */
	end--;
	int64_t now = cae__now_ns();
	if (l->sent && now < l->next_ns)
		return;
	l->sent = true;
	l->next_ns = now + LIVE_INTERVAL_MS * 1000000LL;
	size_t start = end;
	for (int lines = 0; start > 0; start--)
		if (l->tail[start - 1] == '\n' && ++lines == LIVE_MESSAGE_LINES)
			break;
	/* a line whose start is no longer kept is not shown: part of a secret is not masked */
	if (start == 0 && l->total > l->tail_len) {
		while (start < end && l->tail[start] != '\n')
			start++;
		start += start < end;
	}
	size_t n = 0;
	char *text = cae__utf8_sanitize(l->tail + start, end - start, &n);
	char *masked = text ? cae_secrets_mask(l->secrets, text) : NULL;
	if (masked)
		l->ctx->progress(l->ctx->progress_userdata, (double)l->total, 0, masked);
	free(masked);
	free(text);
}

const cae_live_io *cae__tool_live_init(cae__tool_live *l, const cae_tool_env *env)
{
	memset(l, 0, sizeof(*l));
	if (!env->ctx || !env->ctx->progress)
		return NULL;
	l->ctx = env->ctx;
	l->secrets = env->secrets;
	l->io = (cae_live_io){.output = live_output, .ud = l, .stdin_fd = -1, .signal_fd = -1};
	return &l->io;
}
