/* The kubeconfig (include/cae/k8s.h): one context's cluster and user, read with the config
 * module's bounded YAML tree (a kubeconfig in JSON is YAML too), and the in-cluster service
 * account. Certificates, keys and tokens stay in memory. */
#include "cae/k8s.h"

#include "base/fs.h"
#include "base/macro.h"
#include "config/yamltree.h"
#include "k8s/lws-lazy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

#define KUBECONFIG_MAX (4 * 1024 * 1024)
#define PEM_MAX (1024 * 1024)
#define KUBECONFIG_DEPTH 32
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void cae_k8s_auth_clear(cae_k8s_auth *a)
{
	if (!a)
		return;
	free(a->server);
	free(a->ca_pem);
	free(a->cert_pem);
	if (a->key_pem)
		explicit_bzero(a->key_pem, a->key_len);
	free(a->key_pem);
	if (a->token)
		explicit_bzero(a->token, strlen(a->token));
	free(a->token);
	free(a->namespace);
	memset(a, 0, sizeof(*a));
}

/* ---- the tree ---- */

static const cfg_ynode *node(const cfg_ydoc *d, size_t i)
{
	return &d->nodes[i];
}

/* The value of key in map m, or NULL. */
static const cfg_ynode *get(const cfg_ydoc *d, const cfg_ynode *m, const char *key)
{
	if (!m || m->type != CFG_YMAP)
		return NULL;
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const cfg_ynode *k = node(d, m->items[i]);
		if (k->type == CFG_YSCALAR && strcmp(k->value, key) == 0)
			return node(d, m->items[i + 1]);
	}
	return NULL;
}

/* A scalar's text, or NULL (absent, null or not a scalar). */
static const char *str(const cfg_ynode *n)
{
	if (!n || n->type != CFG_YSCALAR || cae__cfg_ynode_is_null(n))
		return NULL;
	return n->value;
}

/* The entry of list (clusters, users, contexts) named name: its inner object (the value
 * of field), or NULL. */
static const cfg_ynode *named(const cfg_ydoc *d, const cfg_ynode *root, const char *list,
			      const char *field, const char *name)
{
	const cfg_ynode *l = get(d, root, list);
	if (!l || l->type != CFG_YSEQ)
		return NULL;
	for (size_t i = 0; i < l->n; i++) {
		const cfg_ynode *e = node(d, l->items[i]);
		const char *n = str(get(d, e, "name"));
		if (n && strcmp(n, name) == 0)
			return get(d, e, field);
	}
	return NULL;
}

/* ---- values ---- */

static int b64(const char *in, char **out, size_t *len, const char *what, cae_error *err)
{
	const cae_lws_api *L = cae__lws();
	if (!L)
		return cae_error_set(err, -ENOSYS, "kubeconfig %s: %s", what, cae__lws_error());
	size_t n = strlen(in);
	if (n > PEM_MAX * 2)
		return cae_error_set(err, -EFBIG, "kubeconfig %s: too large", what);
	char *buf = malloc(n + 1);
	if (!buf)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int k = L->b64_decode_string_len(in, (int)n, buf, (int)n + 1);
	if (k <= 0) {
		free(buf);
		return cae_error_set(err, -EINVAL, "kubeconfig %s: not base64", what);
	}
	buf[k] = '\0';
	*out = buf;
	*len = (size_t)k;
	return 0;
}

static int read_rel(const char *dir, const char *path, size_t max, char **out, size_t *len,
		    const char *what, cae_error *err)
{
	_cleanup_free_ char *full = NULL;
	if (path[0] != '/' && dir && *dir)
		full = cae__path_join(dir, path);
	const char *p = full ? full : path;
	int r = cae__read_file(AT_FDCWD, p, max, out, len);
	if (r < 0)
		return cae_error_set(err, r, "kubeconfig %s %s: %s", what, p, strerror(-r));
	return 0;
}

/* data (base64) or else file (a path), into *out; neither: *out stays NULL. */
static int blob(const char *data, const char *file, const char *dir, char **out, size_t *len,
		const char *what, cae_error *err)
{
	if (data)
		return b64(data, out, len, what, err);
	if (file)
		return read_rel(dir, file, PEM_MAX, out, len, what, err);
	return 0;
}

static int dup_str(const char *s, char **out)
{
	if (!s)
		return 0;
	*out = strdup(s);
	return *out ? 0 : -ENOMEM;
}

/* Trailing white space of a token file is not part of the token. */
static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
}

static int from_doc(const cfg_ydoc *d, const char *dir, const char *context, cae_k8s_auth *a,
		    cae_error *err)
{
	const cfg_ynode *root = d->has_root ? node(d, d->root) : NULL;
	if (!root || root->type != CFG_YMAP)
		return cae_error_set(err, -EINVAL, "kubeconfig: not a mapping");
	const char *ctx_name = context ? context : str(get(d, root, "current-context"));
	const cfg_ynode *ctx = NULL;
	if (ctx_name) {
		ctx = named(d, root, "contexts", "context", ctx_name);
	} else {
		const cfg_ynode *l = get(d, root, "contexts");
		if (l && l->type == CFG_YSEQ && l->n == 1)
			ctx = get(d, node(d, l->items[0]), "context");
	}
	if (!ctx)
		return cae_error_set(err, -ENOENT, "kubeconfig: no context %s%s%s",
				     ctx_name ? "\"" : "(no current-context)",
				     ctx_name ? ctx_name : "", ctx_name ? "\"" : "");
	const char *cl_name = str(get(d, ctx, "cluster"));
	const char *user_name = str(get(d, ctx, "user"));
	const cfg_ynode *cl = cl_name ? named(d, root, "clusters", "cluster", cl_name) : NULL;
	if (!cl)
		return cae_error_set(err, -ENOENT, "kubeconfig: no cluster \"%s\"",
				     cl_name ? cl_name : "");
	const cfg_ynode *user = user_name ? named(d, root, "users", "user", user_name) : NULL;
	const char *server = str(get(d, cl, "server"));
	if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0))
		return cae_error_set(err, -EINVAL,
				     "kubeconfig: cluster \"%s\" has no http(s) server", cl_name);
	if (get(d, user, "exec") || get(d, user, "auth-provider"))
		return cae_error_set(err, -EOPNOTSUPP,
				     "kubeconfig: user \"%s\" authenticates through an exec plugin "
				     "or an auth provider, which cae does not run",
				     user_name);
	const char *insecure = str(get(d, cl, "insecure-skip-tls-verify"));
	a->insecure = insecure && strcmp(insecure, "true") == 0;
	if (dup_str(server, &a->server) < 0 ||
	    dup_str(str(get(d, ctx, "namespace")), &a->namespace) < 0 ||
	    dup_str(str(get(d, user, "token")), &a->token) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = blob(str(get(d, cl, "certificate-authority-data")),
		     str(get(d, cl, "certificate-authority")), dir, &a->ca_pem, &a->ca_len,
		     "certificate-authority", err);
	if (r == 0)
		r = blob(str(get(d, user, "client-certificate-data")),
			 str(get(d, user, "client-certificate")), dir, &a->cert_pem, &a->cert_len,
			 "client-certificate", err);
	if (r == 0)
		r = blob(str(get(d, user, "client-key-data")), str(get(d, user, "client-key")), dir,
			 &a->key_pem, &a->key_len, "client-key", err);
	const char *tf = str(get(d, user, "tokenFile"));
	if (r == 0 && !a->token && tf) {
		size_t n;
		r = read_rel(dir, tf, 64 * 1024, &a->token, &n, "tokenFile", err);
		if (r == 0)
			trim(a->token);
	}
	if (r == 0 && !a->cert_pem != !a->key_pem)
		r = cae_error_set(err, -EINVAL,
				  "kubeconfig: user \"%s\" has a client certificate without its "
				  "key or a key without its certificate",
				  user_name ? user_name : "");
	return r;
}

int cae_k8s_kubeconfig_parse(const char *text, size_t len, const char *dir, const char *context,
			     cae_k8s_auth *out, cae_error *err)
{
	memset(out, 0, sizeof(*out));
	cfg_ydoc d;
	int line = 0;
	char msg[256];
	int r = cae__cfg_yaml_parse(text, len, KUBECONFIG_DEPTH, &d, &line, msg, sizeof(msg));
	if (r == -ENOMEM)
		return cae_error_set(err, r, "out of memory");
	if (r < 0)
		return cae_error_set(err, r, "kubeconfig: line %d: %s", line, msg);
	r = from_doc(&d, dir, context, out, err);
	cae__cfg_ydoc_free(&d);
	if (r < 0)
		cae_k8s_auth_clear(out);
	return r;
}

static int load_file(const char *path, const char *context, cae_k8s_auth *out, cae_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int r = cae__read_file(AT_FDCWD, path, KUBECONFIG_MAX, &text, &len);
	if (r < 0)
		return cae_error_set(err, r, "kubeconfig %s: %s", path, strerror(-r));
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	r = cae_k8s_kubeconfig_parse(text, len, dir, context, out, err);
	free(text);
	return r < 0 ? cae_error_prefix(err, "%s", path) : 0;
}

int cae_k8s_auth_in_cluster(const char *dir, const char *host, const char *port, cae_k8s_auth *out,
			    cae_error *err)
{
	memset(out, 0, sizeof(*out));
	if (!dir)
		dir = SA_DIR;
	if (!host)
		host = getenv("KUBERNETES_SERVICE_HOST");
	if (!port)
		port = getenv("KUBERNETES_SERVICE_PORT");
	_cleanup_free_ char *tok = cae__path_join(dir, "token");
	if (!host || !*host || !port || !*port || !tok || access(tok, R_OK) != 0)
		return cae_error_set(err, -ENOENT, "not in a pod (no service account)");
	size_t n;
	int r = read_rel(dir, "token", 64 * 1024, &out->token, &n, "service account token", err);
	if (r == 0) {
		trim(out->token);
		r = read_rel(dir, "ca.crt", PEM_MAX, &out->ca_pem, &out->ca_len,
			     "service account CA", err);
	}
	if (r == 0) {
		char *ns = NULL;
		_cleanup_free_ char *nsf = cae__path_join(dir, "namespace");
		if (nsf && cae__read_file(AT_FDCWD, nsf, 1024, &ns, &n) == 0) {
			trim(ns);
			out->namespace = ns;
		}
		/* an IPv6 address goes in brackets */
		bool v6 = strchr(host, ':') != NULL;
		if (asprintf(&out->server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
			     port) < 0) {
			out->server = NULL;
			r = cae_error_set(err, -ENOMEM, "out of memory");
		}
	}
	if (r < 0)
		cae_k8s_auth_clear(out);
	return r;
}

int cae_k8s_auth_load(const char *path, const char *context, cae_k8s_auth *out, cae_error *err)
{
	memset(out, 0, sizeof(*out));
	if (path && *path)
		return load_file(path, context, out, err);
	const char *env = getenv("KUBECONFIG");
	if (env && *env) {
		/* a list like PATH: the first file that exists */
		char buf[PATH_MAX];
		for (const char *p = env; *p;) {
			size_t n = strcspn(p, ":");
			if (n && n < sizeof(buf)) {
				memcpy(buf, p, n);
				buf[n] = '\0';
				if (access(buf, R_OK) == 0)
					return load_file(buf, context, out, err);
			}
			p += n + (p[n] == ':');
		}
		return cae_error_set(err, -ENOENT, "KUBECONFIG names no readable file");
	}
	if (cae_k8s_auth_in_cluster(NULL, NULL, NULL, out, NULL) == 0)
		return 0;
	const char *home = getenv("HOME");
	_cleanup_free_ char *def = home ? cae__path_join(home, ".kube/config") : NULL;
	if (def && access(def, R_OK) == 0)
		return load_file(def, context, out, err);
	return cae_error_set(err, -ENOENT,
			     "no kubeconfig: set command_executor.kubernetes.kubeconfig or "
			     "KUBECONFIG, or run in a pod with a service account");
}
