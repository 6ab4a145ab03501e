/* libwebsockets, loaded on first use (internal to src/k8s).
 *
 * Only the kubernetes backend's exec streams need WebSockets, while libwebsockets pulls in
 * OpenSSL, libcap and zlib at every process start; so, as libcurl (src/docker/curl-lazy.h),
 * it is not linked: this file's users include this header instead of <libwebsockets.h> and
 * the lws_* calls they write go through a table filled by dlopen() of the soname found at
 * build time, the first time one is made. When it cannot be loaded, cae__lws() returns NULL
 * and cae__lws_error() says why. */
#ifndef CAE_K8S_LWS_LAZY_H
#define CAE_K8S_LWS_LAZY_H

#include <libwebsockets.h>

typedef struct cae_lws_api {
	struct lws_context *(*create_context)(const struct lws_context_creation_info *info);
	void (*context_destroy)(struct lws_context *ctx);
	struct lws_vhost *(*create_vhost)(struct lws_context *ctx,
					  const struct lws_context_creation_info *info);
	struct lws *(*client_connect_via_info)(const struct lws_client_connect_info *ccinfo);
	int (*service)(struct lws_context *ctx, int timeout_ms);
	void (*cancel_service)(struct lws_context *ctx);
	int (*callback_on_writable)(struct lws *wsi);
	int (*write)(struct lws *wsi, unsigned char *buf, size_t len, enum lws_write_protocol wp);
	void *(*get_opaque_user_data)(const struct lws *wsi);
	void (*set_opaque_user_data)(struct lws *wsi, void *data);
	void (*set_timeout)(struct lws *wsi, enum pending_timeout reason, int secs);
	void (*set_log_level)(int level, void (*log_emit_function)(int level, const char *line));
	int (*is_first_fragment)(struct lws *wsi);
	int (*is_final_fragment)(struct lws *wsi);
	int (*hdr_copy)(struct lws *wsi, char *dest, int len, enum lws_token_indexes h);
	int (*add_http_header_by_token)(struct lws *wsi, enum lws_token_indexes token,
					const unsigned char *value, int length, unsigned char **p,
					unsigned char *end);
	unsigned int (*http_client_http_response)(struct lws *wsi);
	int (*b64_decode_string_len)(const char *in, int in_len, char *out, int out_size);
} cae_lws_api;

/* The table (loads libwebsockets on the first call; thread-safe), or NULL when it cannot be
 * loaded. */
const cae_lws_api *cae__lws(void);
/* Why libwebsockets could not be loaded, or NULL when it was. */
const char *cae__lws_error(void);

#endif
