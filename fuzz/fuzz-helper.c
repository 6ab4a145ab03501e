/* Fuzz target: the cae-helper channel's wire format. Both directions are untrusted: the
 * helper reads requests from whoever holds the socket, and the manager reads answers from
 * a helper running inside a sandbox the command may have subverted. The first byte picks
 * the decoder; a decoded message is encoded again and decoded once more, and must come back
 * the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/utf8.h"
#include "helper/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_request(const char *body, size_t len)
{
	cae_helper_request q;
	cae_error err = {0};
	if (cae__helper_decode_request(body, len, &q, &err) < 0)
		return;
	cae_buf b;
	cae__buf_init(&b, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	cae_helper_request_extra x = {.env_add = (const char *const *)q.env_add,
				      .confine = q.confine};
	if (cae__helper_encode_request(&q.spec, &x, &b) == 0) {
		cae_helper_request q2;
		if (cae__helper_decode_request(b.data + 4, b.len - 4, &q2, &err) != 0)
			abort();
		size_t i = 0;
		for (; q.spec.argv[i]; i++)
			if (!q2.spec.argv[i] || strcmp(q.spec.argv[i], q2.spec.argv[i]) != 0)
				abort();
		if (q2.spec.argv[i] || q.spec.has_stdin != q2.spec.has_stdin ||
		    q.spec.stdin_len != q2.spec.stdin_len || (!q.spec.envp) != (!q2.spec.envp) ||
		    q.spec.timeout_ms != q2.spec.timeout_ms ||
		    q.spec.truncate != q2.spec.truncate || (!q.confine) != (!q2.confine) ||
		    (q.confine && strcmp(q.confine, q2.confine)) || (!q.env_add) != (!q2.env_add))
			abort();
		cae__helper_request_clear(&q2);
	}
	cae__buf_clear(&b);
	cae__helper_request_clear(&q);
}

static void check_response(const char *body, size_t len)
{
	cae_run_result res;
	cae_error err = {0};
	int status = 0;
	if (cae__helper_decode_response(body, len, &status, &res, &err) < 0)
		return;
	if (status == 0) {
		/* What reaches the tools is valid UTF-8, NUL-terminated. */
		if (!res.out || !res.err || !cae__utf8_is_valid(res.out, res.out_len) ||
		    !cae__utf8_is_valid(res.err, res.err_len) || res.out[res.out_len] ||
		    res.err[res.err_len])
			abort();
		if (res.exit_code < 0 || res.exit_code > 383 || res.duration_us < 0)
			abort();
	} else if (status > 0 || err.code != status) {
		abort();
	}
	cae_run_result_clear(&res);
}

/* The editor's and the file operations' results: untrusted like a command's. */
static void check_edit_and_fs_results(const char *body, size_t len)
{
	cae_editor_result er;
	cae_error err = {0};
	int status = 0;
	if (cae__helper_decode_edit_result(body, len, &status, &er, &err) == 0) {
		if (status == 0 &&
		    (!er.text || !cae__utf8_is_valid(er.text, strlen(er.text)) ||
		     (er.summary && !cae__utf8_is_valid(er.summary, strlen(er.summary)))))
			abort();
		if (status > 0 || (status < 0 && err.code != status))
			abort();
		cae_editor_result_clear(&er);
	}
	cae_fs_reply fr;
	if (cae__helper_decode_fs_result(body, len, &status, &fr, &err) == 0) {
		if (status > 0 || (fr.data && fr.data[fr.len]))
			abort();
		cae_fs_reply_clear(&fr);
	}
	cae_helper_edit e;
	if (cae__helper_decode_edit(body, len, &e, &err) == 0)
		cae__helper_edit_clear(&e);
	cae_helper_fs f;
	if (cae__helper_decode_fs(body, len, &f, &err) == 0)
		cae__helper_fs_clear(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *body = (const char *)data + 1;
	if (data[0] & 2)
		check_edit_and_fs_results(body, size - 1);
	else if (data[0] & 1)
		check_response(body, size - 1);
	else
		check_request(body, size - 1);
	return 0;
}
