/* The environment of every git (and the ssh it starts) that cae runs on this host: the mirror
 * cache's ls-remote, fetch and clone, the local backend's clone, the bundle of a local
 * repository. Made from nothing, in this one place: nothing of cae's own environment or of
 * the operator's home reaches a remote the model may have chosen (a ~/.netrc password, an
 * ssh agent, ~/.ssh keys, a GIT_CONFIG_GLOBAL or XDG_CONFIG_HOME naming a config of
 * someone's choosing, GIT_SSH_COMMAND, an askpass program).
 *
 *   HOME=<state_dir>/host-home   a directory of cae's own, 0700, empty (checked before each
 *                                use, made again when it is not): no .netrc, .gitconfig,
 *                                .git-credentials, .curlrc, .config/git
 *   GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null   no configuration file but the
 *                                repository's (and CAE_GIT_ARGV's -c overrides win over it)
 *   GIT_TERMINAL_PROMPT=0, GIT_ASKPASS= (empty: neither core.askPass nor SSH_ASKPASS),
 *   SSH_ASKPASS_REQUIRE=never    no prompt and no askpass program
 *   GIT_SSH_COMMAND=ssh -F /dev/null -o IdentityAgent=none -o IdentitiesOnly=yes
 *       -o IdentityFile=<clone.ssh_identity_file, or none> -o BatchMode=yes
 *       -o UserKnownHostsFile=<clone.ssh_known_hosts_file, or /dev/null>
 *       -o StrictHostKeyChecking=yes ...
 *                                ssh reads `~` from the passwd entry, not $HOME, so every
 *                                option that would look there is given: no config file, no
 *                                agent, no key but the operator's one for cae (GIT_SSH_COMMAND
 *                                wins over core.sshCommand, CAE_GIT_ARGV's included)
 *   PATH, LC_ALL=C               fixed
 * and of the caller's environment only the proxy variables and the TLS roots (SSL_CERT_FILE,
 * SSL_CERT_DIR), which an operator may need for any clone. Credentials reach git only as
 * cae__git_run gives them: the configured forge's token through its own helper. */
#include "backend/backend-internal.h"

#include "base/fs.h"
#include "base/macro.h"
#include "cae/config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

extern char **environ;

#define HOST_HOME "host-home"

/* Of the caller's environment, only these reach the host's git. */
static const char *const kept[] = {"http_proxy",    "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
				   "all_proxy",	    "ALL_PROXY",   "no_proxy",	 "NO_PROXY",
				   "SSL_CERT_FILE", "SSL_CERT_DIR"};

/* True when path is a directory of ours with mode 0700 and nothing in it. */
static bool home_is_clean(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700)
		return false;
	int dfd = dup(fd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return false;
	}
	bool empty = true;
	struct dirent *de;
	while (empty && (de = readdir(d)))
		empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
	closedir(d);
	return empty;
}

int cae__hostgit_home(const cae_config *cfg, char **out, cae_error *err)
{
	*out = NULL;
	const char *state = cfg->command_executor.state_dir;
	if (!state) {
		/* (no state directory: no HOME at all, a directory only root could make) */
		*out = strdup("/nonexistent");
		return *out ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
	}
	_cleanup_free_ char *home = cae__path_join(state, HOST_HOME);
	if (!home)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (!home_is_clean(home)) {
		/* whatever is there (a file, a link, something written into it) goes */
		int r = cae__rm_rf(home);
		if (r < 0 && r != -ENOENT)
			return cae_error_set(err, r, "cannot clear %s: %s", home, strerror(-r));
		r = cae__mkdir_p(state, 0700);
		if (r < 0 || (mkdir(home, 0700) < 0 && errno != EEXIST) || chmod(home, 0700) < 0 ||
		    !home_is_clean(home))
			return cae_error_set(err, r < 0 ? r : -EIO,
					     "cannot make the empty home of git on this host: %s",
					     home);
	}
	*out = TAKE_PTR(home);
	return 0;
}

/* s in single quotes for sh, new string. */
static char *sh_quote(const char *s)
{
	size_t n = 3;
	for (const char *p = s; *p; p++)
		n += *p == '\'' ? 4 : 1;
	char *q = malloc(n);
	if (!q)
		return NULL;
	char *w = q;
	*w++ = '\'';
	for (const char *p = s; *p; p++) {
		if (*p == '\'') {
			memcpy(w, "'\\''", 4);
			w += 4;
		} else {
			*w++ = *p;
		}
	}
	*w++ = '\'';
	*w = '\0';
	return q;
}

char *cae__hostgit_ssh_command(const cae_config *cfg)
{
	const char *id = cfg->command_executor.clone.ssh_identity_file;
	const char *kh = cfg->command_executor.clone.ssh_known_hosts_file;
	_cleanup_free_ char *qid = sh_quote(id ? id : "none");
	_cleanup_free_ char *qkh = sh_quote(kh ? kh : "/dev/null");
	if (!qid || !qkh)
		return NULL;
	char *cmd = NULL;
	if (asprintf(&cmd,
		     "ssh -F /dev/null -o IdentityAgent=none -o IdentitiesOnly=yes "
		     "-o IdentityFile=%s -o CertificateFile=none -o PKCS11Provider=none "
		     "-o BatchMode=yes -o PasswordAuthentication=no "
		     "-o KbdInteractiveAuthentication=no -o HostbasedAuthentication=no "
		     "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes "
		     "-o UpdateHostKeys=no -o ForwardAgent=no -o ControlMaster=no "
		     "-o ControlPath=none -o PermitLocalCommand=no",
		     qid, qkh) < 0)
		return NULL;
	return cmd;
}

static int add(char **v, size_t *n, size_t cap, char *s)
{
	if (!s)
		return -ENOMEM;
	if (*n + 1 >= cap) {
		free(s);
		return -E2BIG;
	}
	v[(*n)++] = s;
	return 0;
}

/* True when extra sets the variable of kv ("K=V"). */
static bool overridden(const char *const *extra, const char *kv)
{
	size_t kl = strcspn(kv, "=");
	for (const char *const *x = extra; x && *x; x++)
		if (strncmp(*x, kv, kl) == 0 && (*x)[kl] == '=')
			return true;
	return false;
}

int cae__hostgit_env(const cae_config *cfg, const char *const *extra, char ***out, cae_error *err)
{
	*out = NULL;
	_cleanup_free_ char *home = NULL;
	int r = cae__hostgit_home(cfg, &home, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *ssh = cae__hostgit_ssh_command(cfg);
	if (!ssh)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t m = 0;
	for (const char *const *x = extra; x && *x; x++)
		m++;
	size_t cap = 16 + ARRAY_SIZE(kept) + m + 1;
	char **v = calloc(cap, sizeof(char *));
	if (!v)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t n = 0;
	char *fixed[16] = {0};
	size_t nf = 0;
	fixed[nf++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	fixed[nf++] = strdup("LC_ALL=C");
	fixed[nf++] = strdup("GIT_CONFIG_NOSYSTEM=1");
	fixed[nf++] = strdup("GIT_CONFIG_GLOBAL=/dev/null");
	fixed[nf++] = strdup("GIT_TERMINAL_PROMPT=0");
	fixed[nf++] = strdup("GIT_ASKPASS=");
	fixed[nf++] = strdup("SSH_ASKPASS_REQUIRE=never");
	/* set (even empty), it replaces core.gitProxy of every configuration file */
	fixed[nf++] = strdup("GIT_PROXY_COMMAND=");
	char *h = NULL, *s = NULL;
	fixed[nf++] = asprintf(&h, "HOME=%s", home) < 0 ? NULL : h;
	fixed[nf++] = asprintf(&s, "GIT_SSH_COMMAND=%s", ssh) < 0 ? NULL : s;
	for (size_t i = 0; i < nf; i++) {
		if (r == 0 && fixed[i] && overridden(extra, fixed[i])) {
			free(fixed[i]);
			continue;
		}
		if (r == 0)
			r = add(v, &n, cap, fixed[i]);
		else
			free(fixed[i]);
	}
	for (char **e = environ; r == 0 && e && *e; e++)
		for (size_t i = 0; i < ARRAY_SIZE(kept); i++) {
			size_t kl = strlen(kept[i]);
			if (strncmp(*e, kept[i], kl) == 0 && (*e)[kl] == '=' &&
			    !overridden(extra, *e))
				r = add(v, &n, cap, strdup(*e));
		}
	for (const char *const *x = extra; r == 0 && x && *x; x++)
		r = add(v, &n, cap, strdup(*x));
	if (r < 0) {
		cae__hostgit_env_free(v);
		return cae_error_set(err, r, "the environment of git on this host: %s",
				     strerror(-r));
	}
	*out = v;
	return 0;
}

void cae__hostgit_env_free(char **envp)
{
	if (!envp)
		return;
	for (char **e = envp; *e; e++) {
		/* a token may be in it (CAE_GIT_TOKEN) */
		explicit_bzero(*e, strlen(*e));
		free(*e);
	}
	free(envp);
}
