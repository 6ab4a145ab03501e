/* Maven's shared repository (pkgcache.h): a Maven-layout directory of release artifacts that
 * cae alone fills, fetching with libcurl from the operator's remote
 * (command_executor.package_cache.maven_remote) the paths an environment with the network
 * resolved (names listed from its ~/.m2/repository after the prepare's install, never its
 * bytes), each checked against the remote's .sha1 (or .sha512) where it publishes one;
 * read-only to every task, whose Maven searches it first (a profile of cae's settings.xml)
 * and copies what it takes into its own local repository. */
#include "backend/backend-internal.h"
#include "backend/pkgcache.h"

#include "backend/net-local.h"
#include "backend/sandbox.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/runner.h"
#include "docker/curl-lazy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

/* what one fill looks at, fetches and takes */
#define LIST_MAX 10000
#define LIST_OUT_MAX (4u << 20)
#define FILE_MAX (512ull << 20)
#define FILL_MAX (4ull << 30)
#define FILL_TIMEOUT_MS (15 * 60 * 1000)
#define SUM_MAX 1024

/* The profile that puts the shared repository (at url) first, for artifacts and plugins
 * alike: releases only (a snapshot changes under the same name), checksums required (cae
 * writes each artifact's .sha1); and, as Maven's own settings.xml has it, no plain-HTTP
 * remote but the loopback's (external:http:* is every http URL whose host is neither
 * localhost nor 127.0.0.1: the served repository is not blocked). */
#define REPO_BODY(url)                                                                             \
	"        <id>cae-package-cache</id>\n"                                                     \
	"        <url>" url "</url>\n"                                                             \
	"        <releases><enabled>true</enabled><checksumPolicy>fail</checksumPolicy>"           \
	"</releases>\n"                                                                            \
	"        <snapshots><enabled>false</enabled></snapshots>\n"
#define SETTINGS_HEAD                                                                              \
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"                                             \
	"<!-- cae's (command_executor.package_cache): the shared Maven repository, read-only, "    \
	"is\n"                                                                                     \
	"     searched before the project's remotes; what Maven takes from it goes into the\n"     \
	"     environment's own local repository. -->\n"                                           \
	"<settings xmlns=\"http://maven.apache.org/SETTINGS/1.2.0\">\n"
#define SETTINGS_MIRRORS                                                                           \
	"  <mirrors>\n"                                                                            \
	"    <mirror>\n"                                                                           \
	"      <id>maven-default-http-blocker</id>\n"                                              \
	"      <mirrorOf>external:http:*</mirrorOf>\n"                                             \
	"      <url>http://0.0.0.0/</url>\n"                                                       \
	"      <blocked>true</blocked>\n"                                                          \
	"    </mirror>\n"                                                                          \
	"  </mirrors>\n"
/* the profile, active as activation says */
/* clang-format off */
#define SETTINGS_PROFILE(url, activation)                                                          \
	"  <profiles>\n"                                                                           \
	"    <profile>\n"                                                                          \
	"      <id>cae-package-cache</id>\n"                                                       \
	activation                                                                                 \
	"      <repositories>\n"                                                                   \
	"      <repository>\n" REPO_BODY(url) "      </repository>\n"                              \
	"      </repositories>\n"                                                                  \
	"      <pluginRepositories>\n"                                                             \
	"      <pluginRepository>\n" REPO_BODY(url) "      </pluginRepository>\n"                  \
	"      </pluginRepositories>\n"                                                            \
	"    </profile>\n"                                                                         \
	"  </profiles>\n"
/* the bound repository: always there, the profile always active */
#define SETTINGS_TAIL                                                                              \
	SETTINGS_MIRRORS                                                                           \
	SETTINGS_PROFILE("file://" CAE_PKGCACHE_MAVEN, "")                                         \
	"  <activeProfiles>\n"                                                                     \
	"    <activeProfile>cae-package-cache</activeProfile>\n"                                   \
	"  </activeProfiles>\n"                                                                    \
	"</settings>\n"
/* clang-format on */
/* The local sandbox's home is a file system of each sandbox's own (the prepare's install
 * runs in one of its own): the local repository is kept in the workspace there, as Go's
 * build cache is, by these settings, the sandbox's global ones (the environment's own
 * ~/.m2/settings.xml may say otherwise). */
static const char settings_local[] = SETTINGS_HEAD
    "  <localRepository>" CAE_PKGCACHE_MAVEN_LOCAL_REPO "</localRepository>\n" SETTINGS_TAIL;
static const char settings_home[] = SETTINGS_HEAD SETTINGS_TAIL;
/* The served repository (kubernetes): the profile active only for a Maven whose
 * environment has CAE_PKGCACHE_SERVE_URL_ENV, which a command gets only from a stream that
 * serves the caches, and names the port its pod's helper listens on (a pod whose stream
 * could not listen, or a later stream that cannot, names no port that another process of
 * the node's network may hold); Maven puts the variable's value in the URL. */
/* clang-format off */
static const char settings_served[] =
	SETTINGS_HEAD
	SETTINGS_MIRRORS
	SETTINGS_PROFILE("${env." CAE_PKGCACHE_SERVE_URL_ENV "}/maven",
			 "      <activation><property><name>env." CAE_PKGCACHE_SERVE_URL_ENV
			 "</name></property></activation>\n")
	"</settings>\n";
/* clang-format on */

const char *cae__pkgcache_maven_settings_served(void)
{
	return settings_served;
}

const char *cae__pkgcache_maven_settings(bool workspace_repo)
{
	return workspace_repo ? settings_local : settings_home;
}

int cae__pkgcache_maven_dir(const cae_config *cfg, bool make, char *out, size_t size,
			    cae_error *err)
{
	return cae__pkgcache_shared_dir(cfg, "maven", make, out, size, err);
}

int cae__pkgcache_maven_settings_file(const cae_config *cfg, char *out, size_t size, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	if (cae__pkgcache_path(cfg, "maven-settings.xml", out, size) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	_cleanup_free_ char *had = NULL;
	size_t len = 0;
	const char *settings = settings_local;
	size_t sl = sizeof(settings_local) - 1;
	if (cae__read_file(AT_FDCWD, out, sl * 2, &had, &len) == 0 && len == sl &&
	    memcmp(had, settings, len) == 0)
		return 1;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", out);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	int r = cae__mkdir_p(dir, 0755);
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, out, settings, sl, 0644, false);
	if (r < 0)
		return cae_error_set(err, r, "cannot write %s: %s", out, strerror(-r));
	return 1;
}

/* ---- which paths ---- */

static bool name_char(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-' || c == '+';
}

bool cae__pkgcache_maven_path_ok(const char *path)
{
	size_t len = strlen(path);
	if (len == 0 || len > 1000)
		return false;
	/* groupId's directories, artifactId, version, file: letters, digits, . _ - + only,
	 * none empty or beginning with a dot (no "..", no hidden file) */
	const char *comp[64];
	size_t clen[64], n = 0;
	for (const char *p = path;;) {
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == 0 || l > 200 || p[0] == '.' || n == ARRAY_SIZE(comp))
			return false;
		for (size_t i = 0; i < l; i++)
			if (!name_char(p[i]))
				return false;
		comp[n] = p;
		clen[n++] = l;
		if (!e)
			break;
		p = e + 1;
	}
	if (n < 4)
		return false;
	const char *file = comp[n - 1], *version = comp[n - 2], *artifact = comp[n - 3];
	size_t fl = clen[n - 1], vl = clen[n - 2], al = clen[n - 3];
	/* a release: a snapshot's files change under the same name */
	if (memmem(version, vl, "SNAPSHOT", 8))
		return false;
	/* <artifactId>-<version>[-<classifier>].(jar|pom) */
	if (fl < al + vl + 5 || memcmp(file, artifact, al) != 0 || file[al] != '-' ||
	    memcmp(file + al + 1, version, vl) != 0)
		return false;
	const char *rest = file + al + 1 + vl;
	size_t rl = fl - al - 1 - vl;
	if (rl < 4 || (memcmp(rest + rl - 4, ".jar", 4) != 0 && memcmp(rest + rl - 4, ".pom", 4)))
		return false;
	/* nothing, or a classifier: -<name> */
	return rl == 4 || (rl > 5 && rest[0] == '-');
}

bool cae__pkgcache_maven_file_ok(const char *path)
{
	size_t n = strlen(path);
	char buf[1001];
	if (n <= 5 || strcmp(path + n - 5, ".sha1") != 0)
		return cae__pkgcache_maven_path_ok(path);
	if (n - 5 >= sizeof(buf))
		return false;
	memcpy(buf, path, n - 5);
	buf[n - 5] = '\0';
	return cae__pkgcache_maven_path_ok(buf);
}

/* ---- fetching ---- */

struct sink {
	int fd;	   /* the file, or -1: into buf */
	char *buf; /* SUM_MAX + 1 bytes */
	uint64_t n, max;
	int werr;
};

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
	struct sink *s = ud;
	size_t k = size * nmemb;
	if (s->n + k > s->max) {
		s->werr = -EFBIG;
		return 0;
	}
	if (s->fd >= 0) {
		int r = cae__write_all(s->fd, p, k);
		if (r < 0) {
			s->werr = r;
			return 0;
		}
	} else {
		memcpy(s->buf + s->n, p, k);
		s->buf[s->n + k] = '\0';
	}
	s->n += k;
	return k;
}

/* GET base+path(+suffix) into s. 1: got it; 0: the remote has no such file (a 4xx); -EIO,
 * -EFBIG or the write's -errno with err set. */
static int fetch(CURL *c, const char *base, const char *path, const char *suffix, struct sink *s,
		 cae_error *err)
{
	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "%s%s%s", base, path, suffix) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_OK && status == 200)
		return 1;
	if (rc == CURLE_HTTP_RETURNED_ERROR && status >= 400 && status < 500)
		return 0;
	if (s->werr == -EFBIG || rc == CURLE_FILESIZE_EXCEEDED)
		return cae_error_set(err, -EFBIG, "%s: larger than %llu bytes", url,
				     (unsigned long long)s->max);
	if (s->werr)
		return cae_error_set(err, s->werr, "cannot write what %s sent: %s", url,
				     strerror(-s->werr));
	return cae_error_set(err, -EIO, "%s: %s (HTTP %ld)", url, curl_easy_strerror(rc), status);
}

/* The first run of exactly hexlen hexadecimal digits in text, lowercased into out. */
static bool sum_of(const char *text, size_t hexlen, char *out)
{
	for (const char *p = text; *p;) {
		size_t n = 0;
		while (isxdigit((unsigned char)p[n]))
			n++;
		if (n == hexlen) {
			for (size_t i = 0; i < n; i++)
				out[i] = (char)tolower((unsigned char)p[i]);
			out[n] = '\0';
			return true;
		}
		p += n ? n : 1;
	}
	return false;
}

struct item {
	const char *path; /* in the listing */
	bool got;	  /* downloaded as work/<index> */
	int want;	  /* the remote's checksum: 0 none, 1 sha1, 512 sha512 */
	char want_sum[129];
	char sha1[41]; /* what was downloaded */
	char sha512[129];
};

/* `prog` (sha1sum, sha512sum) of every downloaded item (sha512: only those the remote gave a
 * sha512 of) in dir, into their sha1 or sha512. */
static int hash_all(const char *dir, struct item *v, size_t n, bool sha512, cae_error *err)
{
	size_t k = 0;
	_cleanup_free_ const char **argv = calloc(n + 3, sizeof(char *));
	_cleanup_free_ char *names = malloc(n * 12 + 1);
	if (!argv || !names)
		return cae_error_set(err, -ENOMEM, "out of memory");
	argv[k++] = sha512 ? "sha512sum" : "sha1sum";
	argv[k++] = "--";
	for (size_t i = 0; i < n; i++) {
		if (!v[i].got || (sha512 && v[i].want != 512))
			continue;
		snprintf(names + i * 12, 12, "%u", (unsigned)(i % LIST_MAX));
		argv[k++] = names + i * 12;
	}
	if (k == 2)
		return 0;
	argv[k] = NULL;
	const char *envp[] = {"PATH=" CAE_SANDBOX_PATH, "LANG=C", NULL};
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = dir,
			     .timeout_ms = FILL_TIMEOUT_MS,
			     .max_stdout = n * 160 + 4096,
			     .cancel_fd = -1};
	cae_run_result res = {0};
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code != 0 || res.out_truncated) {
		r = cae_error_set(err, -EIO, "%s (the shared Maven repository's fill): exit %d",
				  argv[0], res.exit_code);
		cae_run_result_clear(&res);
		return r;
	}
	size_t hl = sha512 ? 128 : 40;
	for (char *save = NULL, *l = strtok_r(res.out, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *end = NULL;
		if (strlen(l) < hl + 3 || l[hl] != ' ')
			continue;
		unsigned long long i = strtoull(l + hl + 2, &end, 10);
		if (!end || *end || i >= n || !v[i].got)
			continue;
		char *dst = sha512 ? v[i].sha512 : v[i].sha1;
		memcpy(dst, l, hl);
		dst[hl] = '\0';
	}
	cae_run_result_clear(&res);
	return 0;
}

/* The text into dfd/name, sealed (0444). */
static int write_sealed(int dfd, const char *name, const char *text)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd < 0)
		return -errno;
	int r = cae__write_all(fd, text, strlen(text));
	if (r == 0 && fchmod(fd, 0444) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* work/<i> (checked) published at shared/<path>, its .sha1 first: the directories made
 * (0755, cae's), the files sealed and linked into place unless one is there (a release's
 * files never change). */
static int publish(int wfd, size_t i, const struct item *it, int sfd)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "%s", it->path);
	char *file = strrchr(buf, '/');
	*file++ = '\0';
	int dfd = dup(sfd);
	if (dfd < 0)
		return -errno;
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (mkdirat(dfd, c, 0755) < 0 && errno != EEXIST) {
			int r = -errno;
			close(dfd);
			return r;
		}
		int sub = openat(dfd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(dfd);
		if (sub < 0)
			return -e;
		dfd = sub;
	}
	char src[32], sum[32], name[260];
	snprintf(src, sizeof(src), "%zu", i);
	snprintf(sum, sizeof(sum), "%zu.sha1", i);
	snprintf(name, sizeof(name), "%s.sha1", file);
	int r = write_sealed(wfd, sum, it->sha1);
	if (r == 0 && linkat(wfd, sum, dfd, name, 0) < 0 && errno != EEXIST)
		r = -errno;
	if (r == 0 && fchmodat(wfd, src, 0444, 0) < 0)
		r = -errno;
	if (r == 0 && linkat(wfd, src, dfd, file, 0) < 0 && errno != EEXIST)
		r = -errno;
	close(dfd);
	return r;
}

/* The paths of listing (one a line, "./" before each or not) that the fill takes: valid
 * (cae__pkgcache_maven_path_ok) and not in shared yet; at most LIST_MAX. The strings are in
 * *buf (new). */
static size_t wanted(const char *listing, int sfd, char **buf, struct item **out)
{
	*out = NULL;
	size_t lines = 1;
	for (const char *p = strchr(listing, '\n'); p && lines < LIST_MAX; p = strchr(p + 1, '\n'))
		lines++;
	*buf = strdup(listing);
	struct item *v = calloc(lines, sizeof(*v));
	if (!*buf || !v) {
		free(v);
		return 0;
	}
	size_t n = 0;
	for (char *save = NULL, *l = strtok_r(*buf, "\n", &save); l && n < lines;
	     l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "./", 2) == 0)
			l += 2;
		if (!cae__pkgcache_maven_path_ok(l) ||
		    faccessat(sfd, l, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		v[n++].path = l;
	}
	*out = v;
	return n;
}

/* The base URL of the remote: http(s), ending in '/' (new). */
static char *remote_base(const cae_config *cfg)
{
	const char *u = cfg->command_executor.package_cache.maven_remote;
	if (!u || (strncmp(u, "https://", 8) != 0 && strncmp(u, "http://", 7) != 0))
		return NULL;
	size_t l = strlen(u);
	char *b = NULL;
	return asprintf(&b, "%s%s", u, l && u[l - 1] == '/' ? "" : "/") < 0 ? NULL : b;
}

/* A handle for the fill's requests: http(s) only, redirects too, bounded waits. */
static CURL *new_handle(void)
{
	CURL *c = curl_easy_init();
	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "cae (package cache)");
	return c;
}

/* Item i into work/<i> (at most max bytes) and the remote's checksum of it, where it
 * publishes one: sha1 (every Maven repository's), else sha512. 0 (it->got says whether the
 * remote had it), or -errno with err set (nothing of it kept). *bytes: what came. */
static int fetch_item(CURL *c, const char *base, int wfd, struct item *it, size_t i, uint64_t max,
		      uint64_t *bytes, cae_error *err)
{
	char name[32], sumbuf[SUM_MAX + 1];
	snprintf(name, sizeof(name), "%zu", i);
	int fd = openat(wfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cae_error_set(err, -errno, "cannot make a file of the fill: %s",
				     strerror(errno));
	struct sink s = {.fd = fd, .max = max};
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s.max);
	int r = fetch(c, base, it->path, "", &s, err);
	close(fd);
	*bytes = s.n;
	static const struct {
		const char *suffix;
		int kind;
		size_t hexlen;
	} sums[] = {{".sha1", 1, 40}, {".sha512", 512, 128}};
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)SUM_MAX);
	for (size_t k = 0; r == 1 && k < ARRAY_SIZE(sums); k++) {
		struct sink t = {.fd = -1, .buf = sumbuf, .max = SUM_MAX};
		sumbuf[0] = '\0';
		int h = fetch(c, base, it->path, sums[k].suffix, &t, err);
		if (h < 0)
			r = h;
		if (h != 1)
			continue;
		it->want = sums[k].kind;
		/* a checksum file that holds none: nothing matches it */
		if (!sum_of(sumbuf, sums[k].hexlen, it->want_sum))
			snprintf(it->want_sum, sizeof(it->want_sum), "unreadable");
		break;
	}
	it->got = r == 1;
	if (r != 1)
		(void)unlinkat(wfd, name, 0);
	return r < 0 ? r : 0;
}

#define FETCHERS 4

/* The items shared by the fetchers, which take the next one in turn. */
struct fetchers {
	const char *base;
	int wfd;
	struct item *v;
	size_t n;
	int64_t deadline;
	pthread_mutex_t lock;
	size_t next;	/* the next item to fetch */
	uint64_t total; /* bytes fetched */
	int r;		/* the first failure: no item is taken after it */
	cae_error err;
};

static void *fetcher_main(void *arg)
{
	struct fetchers *f = arg;
	CURL *c = new_handle();
	for (;;) {
		pthread_mutex_lock(&f->lock);
		size_t i = f->next;
		uint64_t left = f->total < FILL_MAX ? FILL_MAX - f->total : 0;
		bool stop = f->r < 0 || i >= f->n;
		if (!stop && !c) {
			f->r =
			    cae_error_set(&f->err, -ENOSYS, "cannot use libcurl: %s",
					  cae__curl_error() ? cae__curl_error() : "out of memory");
			stop = true;
		} else if (!stop && (cae__now_ms() > f->deadline || left == 0)) {
			f->r = cae_error_set(&f->err, -ETIMEDOUT,
					     "the fill stopped after %zu of %zu files (its time or "
					     "size bound)",
					     i, f->n);
			stop = true;
		}
		if (!stop)
			f->next++;
		pthread_mutex_unlock(&f->lock);
		if (stop)
			break;
		cae_error e;
		cae_error_clear(&e);
		uint64_t bytes = 0;
		int r = fetch_item(c, f->base, f->wfd, &f->v[i], i,
				   left < FILE_MAX ? left : FILE_MAX, &bytes, &e);
		pthread_mutex_lock(&f->lock);
		f->total += bytes;
		if (r < 0 && f->r == 0) {
			f->r = r;
			f->err = e;
		}
		pthread_mutex_unlock(&f->lock);
	}
	if (c)
		curl_easy_cleanup(c);
	return NULL;
}

/* Downloads every item into work (wfd) with its checksum, FETCHERS at a time; the first
 * failure in err (what was fetched before it is kept). */
static int download_all(const char *base, int wfd, struct item *v, size_t n, cae_error *err)
{
	struct fetchers f = {
	    .base = base, .wfd = wfd, .v = v, .n = n, .deadline = cae__now_ms() + FILL_TIMEOUT_MS};
	pthread_mutex_init(&f.lock, NULL);
	pthread_t t[FETCHERS - 1];
	size_t started = 0;
	for (size_t k = 0; k < ARRAY_SIZE(t) && k + 1 < n; k++) {
		if (pthread_create(&t[k], NULL, fetcher_main, &f) != 0)
			break;
		started++;
	}
	fetcher_main(&f);
	for (size_t k = 0; k < started; k++)
		pthread_join(t[k], NULL);
	pthread_mutex_destroy(&f.lock);
	if (f.r < 0 && err)
		*err = f.err;
	return f.r;
}

int cae__pkgcache_maven_fill(const cae_config *cfg, const char *listing, cae_error *err)
{
	char shared[PATH_MAX], fill[PATH_MAX], work[PATH_MAX + 40];
	int r = cae__pkgcache_fill_dirs(cfg, "maven", "maven-fill", shared, fill, err);
	if (r <= 0)
		return r;
	_cleanup_free_ char *base = remote_base(cfg);
	if (!base)
		return cae_error_set(
		    err, -EINVAL,
		    "command_executor.package_cache.maven_remote is not an http(s) "
		    "URL");
	_cleanup_close_ int sfd = open(shared, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		return cae_error_set(err, -errno, "cannot open %s: %s", shared, strerror(errno));
	_cleanup_free_ char *buf = NULL;
	_cleanup_free_ struct item *v = NULL;
	size_t n = wanted(listing, sfd, &buf, &v);
	if (!v)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (n == 0)
		return 0;
	/* done once per list of missing paths (what the remote lacks is not asked again) */
	uint64_t h = cae__pkgcache_fnv1a(0xcbf29ce484222325ULL, "cae-maven 1\n", 12);
	h = cae__pkgcache_fnv1a(h, base, strlen(base) + 1);
	for (size_t i = 0; i < n; i++)
		h = cae__pkgcache_fnv1a(h, v[i].path, strlen(v[i].path) + 1);
	_cleanup_close_ int lfd = -1;
	if ((r = cae__pkgcache_fill_lock(shared, fill, h, work, sizeof(work), &lfd, err)) <= 0)
		return r;
	if ((r = cae__mkdir_p(work, 0700)) < 0)
		return cae_error_set(err, r, "cannot make %s: %s", work, strerror(-r));
	_cleanup_close_ int wfd = open(work, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (wfd < 0)
		return cae_error_set(err, -errno, "cannot open %s: %s", work, strerror(errno));
	cae_error derr;
	cae_error_clear(&derr);
	int dr = download_all(base, wfd, v, n, &derr);
	/* what was downloaded and checked is published, even when a later file was not */
	if ((r = hash_all(work, v, n, false, err)) == 0)
		r = hash_all(work, v, n, true, err);
	size_t bad = 0;
	const char *bad_path = NULL;
	for (size_t i = 0; r == 0 && i < n; i++) {
		if (!v[i].got || !v[i].sha1[0])
			continue;
		const char *have = v[i].want == 512 ? v[i].sha512 : v[i].sha1;
		if (v[i].want && strcmp(have, v[i].want_sum) != 0) {
			bad++;
			bad_path = v[i].path;
			continue;
		}
		if ((r = publish(wfd, i, &v[i], sfd)) < 0)
			cae_error_set(err, r, "cannot publish %s into %s: %s", v[i].path, shared,
				      strerror(-r));
	}
	(void)cae__rm_rf(work);
	if (r < 0)
		return r;
	if (bad)
		return cae_error_set(
		    err, -EBADMSG,
		    "%zu file(s) of %s do not match the checksum it publishes (%s): "
		    "not shared",
		    bad, base, bad_path);
	if (dr < 0) {
		if (err)
			*err = derr;
		return dr;
	}
	(void)cae__pkgcache_filled(shared, h, true);
	return 1;
}

/* ---- the environment's side ---- */

/* What the environment's Maven resolved: the names of its local repository's artifacts (in
 * the workspace on local, in its home in a container). */
static const char list_script[] =
    "for d in " CAE_PKGCACHE_MAVEN_LOCAL_REPO " \"$HOME/.m2/repository\"; do [ -d \"$d\" ] && "
    "(cd \"$d\" && find . -type f \\( -name '*.jar' -o -name '*.pom' \\) 2>/dev/null); done | "
    "head -n 10000; exit 0";

void cae__pkgcache_maven_installed(void *ctx)
{
	cae_prepare *p = ctx;
	if (!p->b->cfg->command_executor.package_cache.enabled || !p->exec)
		return;
	const char *argv[] = {"sh", "-c", list_script, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = p->project,
				.timeout_ms = 60000,
				.max_stdout = LIST_OUT_MAX,
				.max_stderr = 8192,
				.cancel_fd = -1};
	cae_run_result res = {0};
	cae_error err;
	cae_error_clear(&err);
	int r = p->exec(p->exec_ctx, &req, &res, &err);
	if (r == 0 && res.exit_code == 0 && res.out) {
		/* a line cut short is not a path */
		if (res.out_truncated) {
			char *nl = strrchr(res.out, '\n');
			if (nl)
				nl[1] = '\0';
		}
		r = cae__pkgcache_maven_fill(p->b->cfg, res.out, &err);
	}
	cae_run_result_clear(&res);
	if (r < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Maven repository is not filled: %.1100s",
			 err.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
}

/* settings as the environment user's ~/.m2/settings.xml, when the project is Maven's and it
 * has none (a file the task may change: it is read by its own Maven only); served: only
 * from a stream that serves the caches (the variable says so). Whether the image has mvn
 * does not matter: a project's Maven wrapper (mvnw), or a Maven the task installs, reads
 * them too. */
static int home_settings(cae_prepare *p, const char *settings, bool served, cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled || !p->exec)
		return 0;
	static const char script[] =
	    "[ -f pom.xml ] || exit 0; "
	    "[ \"$1\" = any ] || [ -n \"$" CAE_PKGCACHE_SERVE_URL_ENV "\" ] || exit 0; "
	    "S=\"$HOME/.m2/settings.xml\"; "
	    "[ -e \"$S\" ] || [ -L \"$S\" ] || { mkdir -p \"$HOME/.m2\" && cat > \"$S\"; }";
	const char *argv[] = {"sh", "-c", script, "sh", served ? "served" : "any", NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = p->project,
				.stdin_data = settings,
				.stdin_len = strlen(settings),
				.has_stdin = true,
				.timeout_ms = 60000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res = {0};
	int r = p->exec(p->exec_ctx, &req, &res, err);
	if (r == 0 && res.exit_code != 0)
		r = cae_error_set(err, -EIO, "cannot write ~/.m2/settings.xml: exit %d: %.300s",
				  res.exit_code, res.err ? res.err : "");
	cae_run_result_clear(&res);
	return r < 0 ? r : 1;
}

int cae__pkgcache_maven_docker(cae_prepare *p, cae_error *err)
{
	return home_settings(p, settings_home, false, err);
}

void cae__pkgcache_maven_pod(cae_prepare *p)
{
	const cae_config *cfg = p->b->cfg;
	if (!cfg->command_executor.package_cache.enabled)
		return;
	cae_error e = {0};
	if (home_settings(p, settings_served, true, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Maven repository is not used: %.1100s",
			 e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	/* cae's fill acts for the task: only for a pod that has the network itself */
	if (cae__net_full(cfg, p->b->ops->name)) {
		p->deps_opts.maven_installed = cae__pkgcache_maven_installed;
		p->deps_opts.maven_installed_ctx = p;
	}
}
