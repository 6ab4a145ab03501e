/* A Kubernetes API client for the kubernetes backend (src/k8s/): the kubeconfig, pods over
 * REST (libcurl, loaded on first use) and exec streams over WebSocket (libwebsockets, loaded
 * on first use; subprotocol v5.channel.k8s.io where the server offers it, else
 * v4.channel.k8s.io: every message starts with a channel byte, 0 stdin, 1 stdout, 2 stderr,
 * 3 the final status as JSON).
 *
 * Ownership: cae_k8s_auth owns its strings (cae_k8s_auth_clear frees them and accepts a
 * zeroed struct); a client and a stream are opaque and freed by their own functions, which
 * accept NULL. A client may be used by several threads at once. */
#ifndef CAE_K8S_H
#define CAE_K8S_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cae/error.h"
#include "cae/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the API server is and how to authenticate to it: one context of a kubeconfig, or
 * the pod's service account. PEM blobs are kept in memory (never written anywhere). */
typedef struct cae_k8s_auth {
	char *server; /* "https://host:port" */
	char *ca_pem; /* NULL: the system's CAs */
	size_t ca_len;
	char *cert_pem; /* client certificate, NULL: none */
	size_t cert_len;
	char *key_pem;
	size_t key_len;
	char *token;	 /* bearer token, NULL: none */
	bool insecure;	 /* insecure-skip-tls-verify */
	char *namespace; /* the context's namespace, NULL: none given */
} cae_k8s_auth;

/* Parses a kubeconfig (YAML or JSON) of len bytes: the context named context (NULL: its
 * current-context, or its only context), that context's cluster and user. File paths in it
 * are relative to dir (the kubeconfig's directory). Inline *-data fields are base64. A user
 * that authenticates by an exec plugin or an auth provider is refused (-EOPNOTSUPP). */
CAE_EXPORT int cae_k8s_kubeconfig_parse(const char *text, size_t len, const char *dir,
					const char *context, cae_k8s_auth *out, cae_error *err);
/* Loads path (NULL: the first of $KUBECONFIG's files, else the pod's service account under
 * /var/run/secrets/kubernetes.io/serviceaccount with KUBERNETES_SERVICE_HOST and _PORT, else
 * ~/.kube/config). */
CAE_EXPORT int cae_k8s_auth_load(const char *path, const char *context, cae_k8s_auth *out,
				 cae_error *err);
/* The service account of the pod this runs in, from dir (the standard one when NULL) and
 * host/port (KUBERNETES_SERVICE_HOST/_PORT when NULL). -ENOENT when this is not a pod. */
CAE_EXPORT int cae_k8s_auth_in_cluster(const char *dir, const char *host, const char *port,
				       cae_k8s_auth *out, cae_error *err);
CAE_EXPORT void cae_k8s_auth_clear(cae_k8s_auth *a);

typedef struct cae_k8s cae_k8s;

/* A client of the cluster auth names (auth is moved into the client and zeroed). */
CAE_EXPORT int cae_k8s_new(cae_k8s_auth *auth, cae_k8s **out, cae_error *err);
CAE_EXPORT void cae_k8s_free(cae_k8s *k);
CAE_EXPORT const char *cae_k8s_server(const cae_k8s *k);
/* The kubeconfig context's namespace, or NULL. */
CAE_EXPORT const char *cae_k8s_namespace(const cae_k8s *k);

/* One API call: body (borrowed, may be NULL) as JSON (a merge patch for PATCH), the answer's JSON
 * into *out (may be NULL; new reference). Errors from the status: 404 -ENOENT, 409 -EEXIST, 401/403
 * -EACCES, 400/422 -EINVAL, others -EIO, with the server's message in err. */
CAE_EXPORT int cae_k8s_call(cae_k8s *k, const char *method, const char *path, json_t *body,
			    json_t **out, cae_error *err);
CAE_EXPORT int cae_k8s_pod_create(cae_k8s *k, const char *ns, json_t *pod, json_t **out,
				  cae_error *err);
CAE_EXPORT int cae_k8s_pod_get(cae_k8s *k, const char *ns, const char *name, json_t **out,
			       cae_error *err);
/* The pods of ns matching label_selector (e.g. "cae.task_uuid"): a JSON array (new
 * reference). */
CAE_EXPORT int cae_k8s_pod_list(cae_k8s *k, const char *ns, const char *label_selector,
				json_t **items, cae_error *err);
/* Deletes a pod with grace_s seconds of grace (0: at once). A missing pod is -ENOENT. */
CAE_EXPORT int cae_k8s_pod_delete(cae_k8s *k, const char *ns, const char *name, int grace_s,
				  cae_error *err);

/* What a wait is for: 1 when pod (the API's object) is there, 0 to go on waiting, < 0 (err
 * set) to give up. */
typedef int (*cae_k8s_pod_pred)(json_t *pod, void *ud, cae_error *err);
/* Reads the pod until pred says so or timeout_ms passed (-ETIMEDOUT); *out (may be NULL)
 * gets the last pod read (new reference). A pod that goes is -ENOENT. */
CAE_EXPORT int cae_k8s_pod_wait(cae_k8s *k, const char *ns, const char *name, cae_k8s_pod_pred pred,
				void *ud, int64_t timeout_ms, json_t **out, cae_error *err);
/* A predicate: the pod runs (phase Running); a pod that ended (Succeeded, Failed) or whose
 * container cannot start (ErrImageNeverPull, CreateContainerError, ...) is -ECHILD with the
 * reason. */
CAE_EXPORT int cae_k8s_pod_running(json_t *pod, void *ud, cae_error *err);

/* ---- exec streams ---- */

typedef struct cae_k8s_stream cae_k8s_stream;

/* The longest exec URL (path and query: every argument is a command= in it) an exec sends:
 * libwebsockets cuts the request line at 2 KiB, and the API server answers what is left
 * with 400. A longer command is refused with -E2BIG; a long one travels on stdin. */
#define CAE_K8S_EXEC_PATH_MAX 2000

/* Starts argv in container (NULL: the pod's only one) of pod ns/name with stdin, stdout
 * and stderr attached, waiting up to timeout_ms for the upgrade. */
CAE_EXPORT int cae_k8s_exec_open(cae_k8s *k, const char *ns, const char *pod, const char *container,
				 const char *const *argv, int64_t timeout_ms, cae_k8s_stream **out,
				 cae_error *err);
/* A socket that is readable when stdout bytes (or its end) are there; shutting it down ends
 * the stream. */
CAE_EXPORT int cae_k8s_stream_fd(const cae_k8s_stream *s);
/* > 0 bytes of stdout, 0 at end of stream, -EAGAIN when none is there yet, or -errno. */
CAE_EXPORT ssize_t cae_k8s_stream_read(cae_k8s_stream *s, char *buf, size_t size);
/* Sends all of p to stdin (queued for the connection: returns when taken), 0 or -errno. */
CAE_EXPORT int cae_k8s_stream_write(cae_k8s_stream *s, const void *p, size_t n);
/* Ends stdin where the protocol can (v5); -EOPNOTSUPP on v4, which has no way to. */
CAE_EXPORT int cae_k8s_stream_close_stdin(cae_k8s_stream *s);
/* The last 4 KiB of stderr. */
CAE_EXPORT const char *cae_k8s_stream_stderr(cae_k8s_stream *s);
/* The negotiated subprotocol ("v4.channel.k8s.io", ...). */
CAE_EXPORT const char *cae_k8s_stream_protocol(const cae_k8s_stream *s);
/* After end of stream: 0 and the command's exit code from the status channel, or -EIO
 * (err set) when the status says the command could not run, or -EAGAIN when no status came. */
CAE_EXPORT int cae_k8s_stream_status(cae_k8s_stream *s, int *exit_code, cae_error *err);
CAE_EXPORT void cae_k8s_stream_close(cae_k8s_stream *s);

/* One command to completion over one exec: stdin_data (may be NULL) is sent first (on v4
 * the command must not wait for its end: wrap it, e.g. head -c N), stdout and stderr are
 * kept up to max_stdout / max_stderr (0: 1 MiB), the exit code comes from the status
 * channel. At timeout_ms (<= 0: none) or when cancel_fd (-1: none) is readable the stream
 * is closed and res->timed_out / res->cancelled is set (the command itself is then ended
 * by the kubelet's stream teardown, not by signal); a timeout_ms that passes before the API
 * server opened the exec is a timeout too. */
CAE_EXPORT int cae_k8s_exec(cae_k8s *k, const char *ns, const char *pod, const char *container,
			    const char *const *argv, const char *stdin_data, size_t stdin_len,
			    int64_t timeout_ms, size_t max_stdout, size_t max_stderr, int cancel_fd,
			    cae_run_result *res, cae_error *err);

#ifdef __cplusplus
}
#endif
#endif
