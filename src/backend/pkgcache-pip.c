/* pip's shared wheels (pkgcache.h): a directory of wheels that cae alone fills, with
 * `pip download --only-binary=:all:` of a project's requirement lines (no build, no code of
 * any package runs), read-only to every task, whose pip finds it through PIP_FIND_LINKS. */
#include "backend/backend-internal.h"
#include "backend/pkgcache.h"

#include "backend/sandbox.h"
#include "base/fs.h"
#include "base/macro.h"
#include "cae/docker.h"
#include "cae/runner.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define FILL_TIMEOUT_MS (10 * 60 * 1000)

/* The operator's variables (cae's own environment) the fill passes to pip as they are:
 * which index, how to reach it. */
static const char *const operator_vars[] = {
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST",	  "PIP_CERT", "HTTPS_PROXY",
    "https_proxy",   "HTTP_PROXY",	    "http_proxy",	  "NO_PROXY", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR",	    "REQUESTS_CA_BUNDLE",
};

static char pip_index[4200];
static const char *pip_env[3];

static void pip_env_once(void)
{
	size_t n = 0;
	pip_env[n++] = "PIP_FIND_LINKS=" CAE_PKGCACHE_PIP_WHEELS;
	const char *i = getenv("PIP_INDEX_URL");
	if (i && *i && strlen(i) < 4000) {
		snprintf(pip_index, sizeof(pip_index), "PIP_INDEX_URL=%s", i);
		pip_env[n++] = pip_index;
	}
	pip_env[n] = NULL;
}

/* (made once: commands of many threads read it) */
const char *const *cae__pkgcache_pip_env(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, pip_env_once);
	return pip_env;
}

int cae__pkgcache_pip_dir(const cae_config *cfg, bool make, char *out, size_t size, cae_error *err)
{
	return cae__pkgcache_shared_dir(cfg, "pip-wheels", make, out, size, err);
}

/* One requirement line (comments and continuations gone) kept as it is, or not: a name
 * (letters, digits, . _ -), extras, version specifiers, markers, and --hash=ALGO:HEX
 * options; nothing else (an option such as --index-url, -r, -e or -f, a URL or `name @
 * url`, a path or archive file, an environment variable), since the fill would take what
 * that names from elsewhere than the operator's index and publish it under a wheel's name. */
static bool line_kept(const char *l)
{
	if (!isalnum((unsigned char)l[0]))
		return false;
	static const char *const archives[] = {".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz"};
	for (size_t i = 0; i < ARRAY_SIZE(archives); i++)
		if (strstr(l, archives[i]))
			return false;
	for (const char *p = l; *p; p++) {
		if (*p == '-' && p[1] == '-' && (p == l || isspace((unsigned char)p[-1]))) {
			/* an option: --hash=ALGO:HEX only */
			if (strncmp(p, "--hash=", 7) != 0)
				return false;
			p += 7;
			size_t a = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789");
			if (a == 0 || p[a] != ':')
				return false;
			p += a + 1;
			size_t h = strspn(p, "0123456789abcdefABCDEF");
			if (h == 0 || (p[h] && !isspace((unsigned char)p[h])))
				return false;
			p += h - 1;
			continue;
		}
		if (!isalnum((unsigned char)*p) && !strchr("._-[], \t<>=!~*;\"'()+", *p))
			return false;
	}
	return true;
}

/* The lines of requirements.txt the fill downloads (new; "" when none). */
static char *kept_lines(const char *text)
{
	size_t len = strlen(text);
	char *out = malloc(len + 2), *line = malloc(len + 2);
	if (!out || !line) {
		free(out);
		free(line);
		return NULL;
	}
	size_t o = 0, n = 0;
	for (const char *p = text;; p++) {
		if (*p == '\\' && p[1] == '\n') {
			p++;
			continue;
		}
		if (*p && *p != '\n') {
			line[n++] = *p;
			continue;
		}
		line[n] = '\0';
		/* a comment: `#` at the start or after white space */
		for (size_t i = 0; i < n; i++)
			if (line[i] == '#' && (i == 0 || isspace((unsigned char)line[i - 1]))) {
				line[i] = '\0';
				break;
			}
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		size_t l = strlen(s);
		while (l && isspace((unsigned char)s[l - 1]))
			s[--l] = '\0';
		if (l && line_kept(s)) {
			memcpy(out + o, s, l);
			o += l;
			out[o++] = '\n';
		}
		n = 0;
		if (!*p)
			break;
	}
	out[o] = '\0';
	free(line);
	return out;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 300];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0644, false);
}

/* pip download of work/requirements.txt into work/dl, the shared wheels first. 0, 1 when
 * the host's python3 has no pip, or -EIO with err set. */
static int host_download(const char *shared, const char *work, void *ctx, cae_error *err)
{
	(void)ctx;
	char e_home[PATH_MAX + 100], req[PATH_MAX + 100], dl[PATH_MAX + 100];
	snprintf(e_home, sizeof(e_home), "HOME=%s/home", work);
	snprintf(req, sizeof(req), "%s/requirements.txt", work);
	snprintf(dl, sizeof(dl), "%s/dl", work);
	const char *envp[8 + ARRAY_SIZE(operator_vars)] = {
	    "PATH=" CAE_SANDBOX_PATH,	 e_home, "LANG=C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK=1",
	    "PYTHONDONTWRITEBYTECODE=1",
	};
	size_t n = 5;
	char vars[ARRAY_SIZE(operator_vars)][4200];
	for (size_t i = 0; i < ARRAY_SIZE(operator_vars); i++) {
		const char *v = getenv(operator_vars[i]);
		if (v && strlen(v) < 4000) {
			snprintf(vars[i], sizeof(vars[i]), "%s=%s", operator_vars[i], v);
			envp[n++] = vars[i];
		}
	}
	envp[n] = NULL;
	const char *argv[] = {"python3",
			      "-m",
			      "pip",
			      "download",
			      "--only-binary=:all:",
			      "--no-input",
			      "--progress-bar",
			      "off",
			      "--find-links",
			      shared,
			      "-d",
			      dl,
			      "-r",
			      req,
			      NULL};
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = work,
			     .timeout_ms = FILL_TIMEOUT_MS,
			     .max_stdout = 64 << 10,
			     .cancel_fd = -1};
	cae_run_result res = {0};
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r == -ENOENT ? 1 : r;
	if (res.exit_code != 0) {
		size_t l = res.err ? strlen(res.err) : 0;
		if (l && strstr(res.err, "No module named pip"))
			r = 1;
		else
			r = cae_error_set(err, -EIO,
					  "pip download (filling the shared pip wheels): exit %d: "
					  "%s",
					  res.exit_code,
					  l ? res.err + (l > 600 ? l - 600 : 0) : "");
	}
	cae_run_result_clear(&res);
	return r;
}

/* The wheels of dl published into shared. */
static int publish(const char *dl, const char *shared)
{
	DIR *d = opendir(dl);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_close_ int t = open(shared, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (t < 0) {
		closedir(d);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		struct stat st;
		if (e->d_name[0] == '.' || l < 5 || strcmp(e->d_name + l - 4, ".whl") != 0 ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		r = cae__pkgcache_publish_file(dirfd(d), e->d_name, t);
	}
	closedir(d);
	return r;
}

typedef int (*download_fn)(const char *shared, const char *work, void *ctx, cae_error *err);

/* The fill with download, whose wheels are for the Python that salt names ("" for the
 * host's) */
static int fill_with(const cae_config *cfg, const char *requirements, const char *salt,
		     download_fn download, void *ctx, cae_error *err)
{
	char shared[PATH_MAX], fill[PATH_MAX], work[PATH_MAX + 40];
	int r = cae__pkgcache_fill_dirs(cfg, "pip-wheels", "pip-fill", shared, fill, err);
	if (r <= 0)
		return r;
	_cleanup_free_ char *kept = kept_lines(requirements);
	if (!kept)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (!kept[0])
		return 0;
	uint64_t h = cae__pkgcache_fnv1a(0xcbf29ce484222325ULL, "cae-pip 1\n", 10);
	h = cae__pkgcache_fnv1a(h, salt, strlen(salt) + 1);
	h = cae__pkgcache_fnv1a(h, kept, strlen(kept));
	_cleanup_close_ int lfd = -1;
	if ((r = cae__pkgcache_fill_lock(shared, fill, h, work, sizeof(work), &lfd, err)) <= 0)
		return r;
	char home[PATH_MAX + 60], dl[PATH_MAX + 60];
	snprintf(home, sizeof(home), "%s/home", work);
	snprintf(dl, sizeof(dl), "%s/dl", work);
	if ((r = cae__mkdir_p(home, 0700)) < 0 ||
	    (r = write_text(work, "requirements.txt", kept)) < 0)
		return cae_error_set(err, r, "cannot make %s: %s", work, strerror(-r));
	int dr = download(shared, work, ctx, err);
	/* what was downloaded is published, even when some requirement was not */
	r = dr == 1 ? 0 : publish(dl, shared);
	(void)cae__rm_rf(work);
	if (r < 0)
		return cae_error_set(err, r, "cannot publish the wheels into %s: %s", shared,
				     strerror(-r));
	if (dr != 0)
		return dr < 0 ? dr : 0;
	(void)cae__pkgcache_filled(shared, h, true);
	return 1;
}

int cae__pkgcache_pip_fill(const cae_config *cfg, const char *requirements, cae_error *err)
{
	return fill_with(cfg, requirements, "", host_download, NULL, err);
}

int cae__pkgcache_pip_fill_project(const cae_config *cfg, const char *project, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *req = NULL;
	int r = cae__pkgcache_manifest(project, "requirements.txt", &req);
	if (r < 0)
		return cae_error_set(err, r, "cannot read the project's requirements.txt: %s",
				     strerror(-r));
	return req ? cae__pkgcache_pip_fill(cfg, req, err) : 0;
}

int cae__pkgcache_pip_pod(cae_prepare *p, cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *req = NULL;
	int r = cae__pkgcache_container_manifest(p, "requirements.txt", &req, err);
	return r < 0 || !req ? r : cae__pkgcache_pip_fill(p->b->cfg, req, err);
}

/* ---- the fill in a container of the image (docker) ---- */

#define FILL_INSIDE "/fill"
/* the container's exit status when it has no python3 with pip: nothing to fill with (the
 * script's "exit 97") */
#define NO_PIP 97

struct container_fill {
	cae_docker *d;
	const char *image; /* its id */
};

/* pip download in a container of the image (its python3 and pip: wheels for its Python
 * and platform; its user 1000, the host's network to reach the operator's index, no
 * capabilities), work bound at FILL_INSIDE and the shared wheels read-only at
 * CAE_PKGCACHE_PIP_WHEELS: nothing of a task's but the requirement lines kept. */
static int container_download(const char *shared, const char *work, void *ctx, cae_error *err)
{
	struct container_fill *cf = ctx;
	static const char *const owned[] = {"", "/home", "/requirements.txt"};
	for (size_t i = 0; i < ARRAY_SIZE(owned); i++) {
		char p[PATH_MAX + 40];
		snprintf(p, sizeof(p), "%s%s", work, owned[i]);
		if (lchown(p, 1000, 1000) < 0)
			return cae_error_set(err, -errno, "cannot give %s to uid 1000: %s", p,
					     strerror(errno));
	}
	char b_work[PATH_MAX + 40], b_shared[PATH_MAX + 40];
	snprintf(b_work, sizeof(b_work), "%s:" FILL_INSIDE, work);
	snprintf(b_shared, sizeof(b_shared), "%s:" CAE_PKGCACHE_PIP_WHEELS ":ro", shared);
	json_t *env = json_pack("[s,s,s,s]", "HOME=" FILL_INSIDE "/home", "LANG=C.UTF-8",
				"PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1");
	cae__pkgcache_env_append(env, operator_vars, ARRAY_SIZE(operator_vars));
	static const char script[] =
	    "python3 -c 'import pip' >/dev/null 2>&1 || exit 97; exec python3 -m pip download "
	    "--only-binary=:all: --no-input --progress-bar off "
	    "--find-links " CAE_PKGCACHE_PIP_WHEELS " -d " FILL_INSIDE "/dl -r " FILL_INSIDE
	    "/requirements.txt";
	json_t *body =
	    env ? json_pack("{s:s, s:s, s:[s,s,s], s:s, s:o, s:{s:s}, s:{s:[s,s], s:s, "
			    "s:[s], s:[s]}}",
			    "Image", cf->image, "User", "1000:1000", "Cmd", "sh", "-c", script,
			    "WorkingDir", FILL_INSIDE, "Env", env, "Labels", "cae.pkgcache_fill",
			    "pip", "HostConfig", "Binds", b_work, b_shared, "NetworkMode", "host",
			    "CapDrop", "ALL", "SecurityOpt", "no-new-privileges")
		: NULL;
	int code;
	int r =
	    cae__pkgcache_docker_fill(cf->d, "cae-pipfill", work, cf->image, body, FILL_TIMEOUT_MS,
				      "pip download (filling the shared pip wheels)", &code, err);
	if (r == -EIO && code == NO_PIP) {
		cae_error_clear(err);
		return 1;
	}
	return r;
}

int cae__pkgcache_pip_docker(cae_prepare *p, cae_docker *d, const char *container, cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *req = NULL;
	int r = cae__pkgcache_container_manifest(p, "requirements.txt", &req, err);
	if (r < 0 || !req)
		return r;
	/* the image's Python: its id */
	char key[80];
	if ((r = cae__pkgcache_image_key(d, container, key, sizeof(key), err)) < 0)
		return r;
	struct container_fill cf = {.d = d, .image = key};
	return fill_with(p->b->cfg, req, key, container_download, &cf, err);
}
