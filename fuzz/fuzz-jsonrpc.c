/* Fuzz target: JSON-RPC framing, message validation and MCP tool-argument decoding.
 *
 * Each input is used twice: (1) pushed through the framer in chunks of a size taken from
 * the first byte, every line parsed, validated and, for MCP methods, its params decoded the
 * way the server does; (2) served whole by cae_mcp_serve (input from a memfd, output to
 * /dev/null) with a fake tool handler, so the server's dispatch, batches, cancellation and
 * worker threads see the same bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cae/jsonrpc.h"
#include "cae/mcp.h"
#include "mcp/mcp-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static json_t *fake_list(void *ud, bool with_output_schema)
{
	(void)ud;
	json_t *t = json_pack("{s:s, s:s, s:{s:s}}", "name", "echo", "description", "echo",
			      "inputSchema", "type", "object");
	if (t && with_output_schema)
		json_object_set_new(t, "outputSchema", json_pack("{s:s}", "type", "object"));
	return json_pack("[o]", t);
}

static int fake_call(void *ud, const char *name, json_t *args, const cae_call_ctx *ctx,
		     cae_tool_result *res, cae_error *err)
{
	(void)ud;
	if (strcmp(name, "echo") == 0) {
		json_t *text = json_object_get(args, "text");
		if (!json_is_string(text))
			return cae_error_set(err, -EINVAL, "\"text\" must be a string");
		res->text = strdup(json_string_value(text));
		res->structured = json_pack("{s:O}", "text", text);
		return 0;
	}
	if (strcmp(name, "progress") == 0) {
		json_t *steps = json_object_get(args, "steps");
		size_t i;
		json_t *v;
		if (ctx->progress && json_is_array(steps))
			json_array_foreach(steps, i, v)
			{
				if (i >= 16)
					break;
				ctx->progress(ctx->progress_userdata, json_number_value(v), 10,
					      json_string_value(json_object_get(args, "message")));
			}
		res->text = json_dumps(args, JSON_COMPACT);
		return 0;
	}
	if (strcmp(name, "fail") == 0) {
		res->text = strdup("\xff not utf-8");
		res->structured = json_array(); /* not an object: must be left out */
		res->is_error = true;
		return 0;
	}
	if (strcmp(name, "cancelled") == 0)
		return cae_error_set(err, -ECANCELED, "cancelled");
	if (strcmp(name, "internal") == 0)
		return cae_error_set(err, -EIO, "broken");
	return cae_error_set(err, -ENOENT, "no tool %s", name);
}

/* Everything the server does with one parsed message, minus the I/O. */
static void decode_message(json_t *v)
{
	cae_jsonrpc_msg m;
	cae_jsonrpc_err e;
	if (cae_jsonrpc_validate(v, &m, &e) < 0) {
		json_decref(cae_jsonrpc_error(m.id, e.code, e.message, NULL));
		return;
	}
	if (m.kind != CAE_JSONRPC_REQUEST && m.kind != CAE_JSONRPC_NOTIFICATION)
		return;
	if (strcmp(m.method, "tools/call") == 0) {
		cae_mcp_call_params p;
		if (cae__mcp_decode_call_params(m.params, &p, &e) == 0) {
			cae_tool_result res = {.text = json_dumps(p.arguments, JSON_COMPACT),
					       .structured = json_incref(p.arguments)};
			json_t *r = cae_jsonrpc_result(m.id, cae__mcp_tool_result_json(&res, true));
			char *line = r ? cae_jsonrpc_encode(r, NULL) : NULL;
			free(line);
			json_decref(r);
			cae__mcp_tool_result_release(&res);
			cae__mcp_call_params_clear(&p);
		}
	} else if (strcmp(m.method, "initialize") == 0) {
		const char *version;
		if (cae__mcp_decode_initialize(m.params, &version, &e) == 0)
			json_decref(cae__mcp_initialize_result(cae_mcp_negotiate(version), "cae",
							       "0", NULL));
	} else if (strcmp(m.method, "tools/list") == 0) {
		(void)cae__mcp_decode_list_params(m.params, &e);
	} else if (strcmp(m.method, "notifications/cancelled") == 0) {
		(void)cae__mcp_decode_cancelled(m.params);
	}
}

static void frame_and_decode(const uint8_t *data, size_t size)
{
	size_t chunk = size ? (size_t)data[0] % 64 + 1 : 1;
	/* a short limit for half the inputs, so that oversized lines (and the id read from
	 * them as they are skipped) are common */
	cae_jsonrpc_framer *f = cae_jsonrpc_framer_new(size > 1 && (data[1] & 1) ? 48 : 4096);
	if (!f)
		return;
	size_t off = 0;
	for (;;) {
		const char *line;
		size_t len;
		int r;
		while ((r = cae_jsonrpc_framer_next(f, &line, &len)) != 0) {
			if (r == -E2BIG) {
				json_t *id = cae_jsonrpc_framer_dropped_id(f);
				if (id && !json_is_string(id) && !json_is_integer(id))
					abort();
				json_decref(id);
			}
			if (r != 1)
				continue;
			json_t *v;
			cae_jsonrpc_err e;
			if (cae_jsonrpc_parse(line, len, 16, &v, &e) < 0)
				continue;
			if (json_is_array(v)) {
				size_t i;
				json_t *x;
				json_array_foreach(v, i, x) decode_message(x);
			} else {
				decode_message(v);
			}
			json_decref(v);
		}
		if (off == size) {
			while (cae_jsonrpc_framer_finish(f, &line, &len) != 0)
				;
			break;
		}
		size_t n = size - off < chunk ? size - off : chunk;
		long took = cae_jsonrpc_framer_feed(f, data + off, n);
		if (took <= 0)
			break;
		off += (size_t)took;
	}
	cae_jsonrpc_framer_free(f);
}

static void serve(const uint8_t *data, size_t size)
{
	int in = memfd_create("fuzz-jsonrpc", MFD_CLOEXEC);
	int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (in >= 0 && out >= 0 && write(in, data, size) == (ssize_t)size &&
	    lseek(in, 0, SEEK_SET) == 0) {
		cae_mcp_handler h = {fake_list, fake_call, NULL};
		cae_mcp_options o = {.max_message_size = 8192,
				     .max_depth = 16,
				     .max_calls = 2,
				     .max_queued = 4,
				     .shutdown_fd = -1};
		cae_error err;
		(void)cae_mcp_serve(&h, in, out, &o, &err);
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	frame_and_decode(data, size);
	serve(data, size);
	return 0;
}
