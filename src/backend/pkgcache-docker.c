/* Go's shared build cache on the docker backend (pkgcache.h): filled by cae in a container
 * of its own per Go image, bound read-only into the instance's containers, copied into a
 * container's GOCACHE by its prepare. */
#include "backend/backend-internal.h"
#include "backend/pkgcache.h"

#include "base/fs.h"
#include "base/macro.h"
#include "cae/docker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define FILL_TIMEOUT_MS (15 * 60 * 1000)
#define FILL_INSIDE CAE_PKGCACHE_GO_FILL_INSIDE

const char cae__pkgcache_go_fill_script[] =
    "set -e; mkdir -p " FILL_INSIDE "/pkg " FILL_INSIDE "/home " FILL_INSIDE
    "/build; cd " FILL_INSIDE
    "/pkg; printf 'module cae.invalid/fill\\n' > go.mod; printf 'package fill\\n\\nimport "
    "\"testing\"\\n\\nfunc TestFill(t *testing.T) {}\\n' > fill_test.go; { printf 'package "
    "fill\\n\\nimport (\\n'; go list std | grep -v -e internal -e '^vendor/' -e '^unsafe$' -e "
    "'^syscall/js$' -e '^runtime/cgo$' -e '\"' | sed 's/.*/\\t_ \"&\"/'; printf ')\\n'; } > "
    "fill.go; go test -count=1 -run '^$' . >/dev/null";

void cae__pkgcache_env_append(json_t *env, const char *const *names, size_t n)
{
	for (size_t i = 0; env && i < n; i++) {
		const char *v = getenv(names[i]);
		char kv[4200];
		if (v && strlen(v) < 4000) {
			snprintf(kv, sizeof(kv), "%s=%s", names[i], v);
			json_array_append_new(env, json_string(kv));
		}
	}
}

int cae__pkgcache_docker_fill(struct cae_docker *d, const char *prefix, const char *dir,
			      const char *image, json_t *body, int64_t timeout_ms, const char *what,
			      int *exit_code, cae_error *err)
{
	*exit_code = -1;
	/* one name per fill directory: another instance's fill of the same image (another
	 * state directory) is not this one's to remove */
	char name[128];
	snprintf(name, sizeof(name), "%.64s-%016llx", prefix,
		 (unsigned long long)cae__pkgcache_fnv1a(0xcbf29ce484222325ULL, dir, strlen(dir)));
	cae_docker *fd = NULL;
	int r = body ? cae_docker_new(cae_docker_host(d), &fd, err)
		     : cae_error_set(err, -ENOMEM, "out of memory");
	if (r < 0) {
		json_decref(body);
		return r;
	}
	cae_docker_set_timeout(fd, timeout_ms);
	/* one left by a fill that died with its process */
	(void)cae_docker_container_remove(fd, name, true, true, NULL);
	_cleanup_free_ char *id = NULL;
	r = cae_docker_container_create(fd, name, body, &id, NULL, err);
	json_decref(body);
	if (r >= 0) {
		json_t *res = NULL;
		char path[200];
		snprintf(path, sizeof(path), "/containers/%s/wait", id);
		if ((r = cae_docker_container_start(fd, id, err)) >= 0 &&
		    (r = cae_docker_call(fd, "POST", path, NULL, &res, err)) >= 0) {
			json_t *c = json_object_get(res, "StatusCode");
			if (json_is_integer(c))
				*exit_code = (int)json_integer_value(c);
			if (*exit_code != 0)
				r = cae_error_set(err, -EIO, "%s in a container of %s: exit %d",
						  what, image, *exit_code);
		}
		json_decref(res);
		(void)cae_docker_container_remove(fd, id, true, true, NULL);
	}
	cae_docker_free(fd);
	return r < 0 ? r : 0;
}

/* Runs the fill in a container of image (an id) with dir bound at FILL_INSIDE: 0 when it
 * exited 0. */
static int run_fill(cae_docker *d, const char *image, const char *key, const char *dir,
		    cae_error *err)
{
	char bind[PATH_MAX + 400];
	snprintf(bind, sizeof(bind), "%s:" FILL_INSIDE, dir);
	json_t *body = json_pack(
	    "{s:s, s:s, s:[s,s,s], s:s, s:[s,s,s,s,s,s,s,s,s], s:b, s:{s:s}, s:{s:[s], s:s, "
	    "s:[s], s:[s]}}",
	    "Image", image, "User", "1000:1000", "Cmd", "sh", "-c", cae__pkgcache_go_fill_script,
	    "WorkingDir", "/", "Env", "HOME=" FILL_INSIDE "/home", "GOCACHE=" FILL_INSIDE "/build",
	    "GOENV=off", "GOFLAGS=", "GOPROXY=off", "GOWORK=off", "GO111MODULE=on",
	    "GOTOOLCHAIN=local", "LANG=C.UTF-8", "NetworkDisabled", 1, "Labels",
	    "cae.pkgcache_fill", "go", "HostConfig", "Binds", bind, "NetworkMode", "none",
	    "CapDrop", "ALL", "SecurityOpt", "no-new-privileges");
	int code;
	return cae__pkgcache_docker_fill(d, "cae-gofill", dir, image, body, FILL_TIMEOUT_MS,
					 "filling the shared Go build cache", &code, err);
}

/* <go-docker>/<key>/build for image: filled and sealed unless it is there. */
static int fill(cae_docker *d, const char *shared, const char *image, const char *key,
		cae_error *err)
{
	char kdir[PATH_MAX + 100], build[PATH_MAX + 120], work[PATH_MAX + 100],
	    wdir[PATH_MAX + 200], lock[PATH_MAX + 220];
	snprintf(kdir, sizeof(kdir), "%s/%s", shared, key);
	snprintf(build, sizeof(build), "%s/build", kdir);
	if (cae__is_dir(build))
		return 0;
	/* the fill's own tree is out of the bound one (<instance>/go-docker-fill, 0700): no
	 * container sees it while the fill's user owns its files */
	snprintf(work, sizeof(work), "%s-fill", shared);
	snprintf(wdir, sizeof(wdir), "%s/%s", work, key);
	snprintf(lock, sizeof(lock), "%s/%s.lock", work, key);
	int r;
	if ((mkdir(work, 0700) < 0 && errno != EEXIST) || (r = cae__mkdir_p(kdir, 0755)) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", work, strerror(errno));
	_cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock %s: %s", lock, strerror(errno));
	if (cae__is_dir(build))
		return 0; /* another prepare filled it meanwhile */
	(void)cae__rm_rf(wdir);
	if (mkdir(wdir, 0700) < 0 || chown(wdir, 1000, 1000) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", wdir, strerror(errno));
	r = run_fill(d, image, key, wdir, err);
	char out[PATH_MAX + 220];
	snprintf(out, sizeof(out), "%s/build", wdir);
	if (r == 0 && (r = cae__pkgcache_seal(out)) < 0)
		cae_error_set(err, r, "cannot seal %s: %s", out, strerror(-r));
	if (r == 0 && rename(out, build) < 0)
		r = cae_error_set(err, -errno, "cannot move %s: %s", out, strerror(errno));
	(void)cae__rm_rf(wdir);
	return r;
}

int cae__pkgcache_image_key(cae_docker *d, const char *container, char *key, size_t size,
			    cae_error *err)
{
	json_t *ins = NULL;
	int r = cae_docker_container_inspect(d, container, &ins, err);
	if (r < 0)
		return r;
	const char *image = json_string_value(json_object_get(ins, "Image"));
	const char *hex = image ? strchr(image, ':') : NULL;
	snprintf(key, size, "%.64s", hex ? hex + 1 : image ? image : "");
	json_decref(ins);
	if (!key[0] || strspn(key, "0123456789abcdef") != strlen(key))
		return cae_error_set(err, -EINVAL, "the container's image has no id");
	return 0;
}

int cae__pkgcache_go_probe(cae_prepare *p, char **gocache, cae_error *err)
{
	*gocache = NULL;
	/* where the build cache is, asked out of the project: no go.mod or go.work of the
	 * task's is read */
	const char *probe_argv[] = {
	    "sh", "-c",
	    "test -f /workspace/project/go.mod && command -v go >/dev/null 2>&1 && cd / && "
	    "GOTOOLCHAIN=local go env GOCACHE",
	    NULL};
	cae_exec_request req = {.argv = probe_argv,
				.cwd = "/workspace",
				.timeout_ms = 60000,
				.max_stdout = 8192,
				.max_stderr = 8192,
				.cancel_fd = -1};
	cae_run_result res = {0};
	int r = p->exec(p->exec_ctx, &req, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code == 0 && res.out && res.out[0] == '/') {
		res.out[strcspn(res.out, "\n")] = '\0';
		*gocache = strdup(res.out);
	}
	cae_run_result_clear(&res);
	return *gocache ? 1 : 0;
}

int cae__pkgcache_go_docker_seed(cae_prepare *p, cae_docker *d, const char *container,
				 cae_error *err)
{
	char shared[PATH_MAX];
	int r = cae__pkgcache_go_docker_dir(p->b->cfg, shared, sizeof(shared), err);
	if (r <= 0)
		return r;
	_cleanup_free_ char *gocache = NULL;
	if ((r = cae__pkgcache_go_probe(p, &gocache, err)) <= 0)
		return r;
	/* the image's id, from the container */
	char key[80];
	if ((r = cae__pkgcache_image_key(d, container, key, sizeof(key), err)) < 0)
		return r;
	if ((r = fill(d, shared, key, key, err)) < 0)
		return r;
	cae__pkgcache_used(shared); /* the last use, for the prune (pkgcache.h) */
	/* the copy, as the container's user: its own files */
	_cleanup_free_ char *script = NULL;
	if (asprintf(&script,
		     "test -d " CAE_PKGCACHE_GO_DOCKER
		     "/%s/build && mkdir -p \"$1\" && cp -r " CAE_PKGCACHE_GO_DOCKER
		     "/%s/build/. \"$1\"/",
		     key, key) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	const char *copy_argv[] = {"sh", "-c", script, "sh", gocache, NULL};
	cae_exec_request req = {.argv = copy_argv,
				.cwd = "/",
				.timeout_ms = 5 * 60000,
				.max_stdout = 8192,
				.max_stderr = 8192,
				.cancel_fd = -1};
	cae_run_result res = {0};
	if ((r = p->exec(p->exec_ctx, &req, &res, err)) < 0)
		return r;
	if (res.exit_code != 0)
		r = cae_error_set(err, -EIO, "cannot copy the shared Go build cache into %s: %s",
				  gocache, res.err ? res.err : "");
	cae_run_result_clear(&res);
	return r < 0 ? r : 1;
}
