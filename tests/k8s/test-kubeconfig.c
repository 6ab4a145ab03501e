/* The kubeconfig: contexts, inline and file credentials, relative paths, tokens, the
 * in-cluster service account, and what is refused (an exec plugin, a half pair of
 * certificate and key, a missing context, a server that is not http(s), bad base64). */
#include "testutil.h"

#include "base/fs.h"
#include "cae/k8s.h"

#include <errno.h>

static char *dir;

static void setup(void)
{
	dir = tu_mkdtemp();
}

static void teardown(void)
{
	cae__rm_rf(dir);
	free(dir);
}

static int parse(const char *text, const char *context, cae_k8s_auth *a, cae_error *err)
{
	return cae_k8s_kubeconfig_parse(text, strlen(text), dir, context, a, err);
}

/* "-----BEGIN CERT-----\n" and "KEY" in base64 */
#define CERT_B64 "LS0tLS1CRUdJTiBDRVJULS0tLS0K"
#define KEY_B64 "S0VZ"

static const char two_contexts[] = "apiVersion: v1\n"
				   "kind: Config\n"
				   "current-context: b\n"
				   "clusters:\n"
				   "- name: ca\n"
				   "  cluster: {server: 'https://10.0.0.1:6443', "
				   "certificate-authority-data: " CERT_B64 "}\n"
				   "- name: cb\n"
				   "  cluster:\n"
				   "    server: https://[::1]:8443\n"
				   "    certificate-authority: pki/ca.crt\n"
				   "users:\n"
				   "- name: ua\n"
				   "  user: {token: tok-a}\n"
				   "- name: ub\n"
				   "  user:\n"
				   "    client-certificate-data: " CERT_B64 "\n"
				   "    client-key-data: " KEY_B64 "\n"
				   "contexts:\n"
				   "- name: a\n"
				   "  context: {cluster: ca, user: ua, namespace: team-a}\n"
				   "- name: b\n"
				   "  context: {cluster: cb, user: ub}\n";

START_TEST(current_context_with_inline_data_and_relative_files)
{
	tu_sh("mkdir -p %s/pki && printf 'CA-PEM' > %s/pki/ca.crt", dir, dir);
	cae_k8s_auth a;
	cae_error err = {0};
	ck_assert_msg(parse(two_contexts, NULL, &a, &err) == 0, "%s", err.message);
	ck_assert_str_eq(a.server, "https://[::1]:8443");
	ck_assert_uint_eq(a.ca_len, 6);
	ck_assert_mem_eq(a.ca_pem, "CA-PEM", 6);
	ck_assert_str_eq(a.cert_pem, "-----BEGIN CERT-----\n");
	ck_assert_str_eq(a.key_pem, "KEY");
	ck_assert_ptr_null(a.token);
	ck_assert_ptr_null(a.namespace);
	ck_assert(!a.insecure);
	cae_k8s_auth_clear(&a);

	ck_assert_msg(parse(two_contexts, "a", &a, &err) == 0, "%s", err.message);
	ck_assert_str_eq(a.server, "https://10.0.0.1:6443");
	ck_assert_str_eq(a.token, "tok-a");
	ck_assert_str_eq(a.namespace, "team-a");
	ck_assert_str_eq(a.ca_pem, "-----BEGIN CERT-----\n");
	ck_assert_ptr_null(a.cert_pem);
	cae_k8s_auth_clear(&a);
	cae_k8s_auth_clear(&a); /* a cleared struct again: nothing happens */
}
END_TEST

START_TEST(json_kubeconfig_token_file_and_insecure)
{
	tu_write(dir, "tok", "secret-token\n\n");
	const char *j =
	    "{\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"http://127.0.0.1:8080\","
	    "\"insecure-skip-tls-verify\":true}}],"
	    "\"users\":[{\"name\":\"u\",\"user\":{\"tokenFile\":\"tok\"}}],"
	    "\"contexts\":[{\"name\":\"only\",\"context\":{\"cluster\":\"c\",\"user\":\"u\"}}]}";
	cae_k8s_auth a;
	cae_error err = {0};
	/* no current-context: the only context */
	ck_assert_msg(parse(j, NULL, &a, &err) == 0, "%s", err.message);
	ck_assert_str_eq(a.server, "http://127.0.0.1:8080");
	ck_assert_str_eq(a.token, "secret-token");
	ck_assert(a.insecure);
	cae_k8s_auth_clear(&a);
}
END_TEST

START_TEST(refusals)
{
	cae_k8s_auth a;
	cae_error err = {0};
	ck_assert_int_eq(parse(two_contexts, "nope", &a, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "nope"));
	ck_assert_ptr_null(a.server);

	const char *exec_user = "current-context: x\n"
				"clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
				"users: [{name: u, user: {exec: {command: /bin/evil}}}]\n"
				"contexts: [{name: x, context: {cluster: c, user: u}}]\n";
	ck_assert_int_eq(parse(exec_user, NULL, &a, &err), -EOPNOTSUPP);
	ck_assert_ptr_null(a.server);

	const char *half = "current-context: x\n"
			   "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
			   "users: [{name: u, user: {client-certificate-data: " CERT_B64 "}}]\n"
			   "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
	ck_assert_int_eq(parse(half, NULL, &a, &err), -EINVAL);

	const char *badb64 = "current-context: x\n"
			     "clusters: [{name: c, cluster: {server: 'https://h', "
			     "certificate-authority-data: '!!!!'}}]\n"
			     "users: [{name: u, user: {}}]\n"
			     "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
	ck_assert_int_eq(parse(badb64, NULL, &a, &err), -EINVAL);

	const char *file_scheme = "current-context: x\n"
				  "clusters: [{name: c, cluster: {server: 'file:///etc/passwd'}}]\n"
				  "users: [{name: u, user: {}}]\n"
				  "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
	ck_assert_int_eq(parse(file_scheme, NULL, &a, &err), -EINVAL);

	const char *missing_file = "current-context: x\n"
				   "clusters: [{name: c, cluster: {server: 'https://h', "
				   "certificate-authority: nothere.crt}}]\n"
				   "users: [{name: u, user: {}}]\n"
				   "contexts: [{name: x, context: {cluster: c, user: u}}]\n";
	ck_assert_int_eq(parse(missing_file, NULL, &a, &err), -ENOENT);

	ck_assert_int_eq(parse("- a\n- b\n", NULL, &a, &err), -EINVAL);
	ck_assert_int_eq(parse("a: [\n", NULL, &a, &err), -EINVAL);

	/* a client refuses a server it cannot parse */
	cae_k8s_auth bad = {.server = strdup("https://h:99999")};
	cae_k8s *k = NULL;
	ck_assert_int_eq(cae_k8s_new(&bad, &k, &err), -EINVAL);
	ck_assert_ptr_null(k);
}
END_TEST

START_TEST(in_cluster_service_account)
{
	cae_k8s_auth a;
	cae_error err = {0};
	ck_assert_int_eq(cae_k8s_auth_in_cluster(dir, "10.96.0.1", "443", &a, &err), -ENOENT);
	tu_write(dir, "token", "sa-token\n");
	tu_write(dir, "ca.crt", "SA-CA");
	tu_write(dir, "namespace", "work\n");
	ck_assert_int_eq(cae_k8s_auth_in_cluster(dir, NULL, "", &a, &err), -ENOENT);
	ck_assert_msg(cae_k8s_auth_in_cluster(dir, "fd00::1", "443", &a, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(a.server, "https://[fd00::1]:443");
	ck_assert_str_eq(a.token, "sa-token");
	ck_assert_str_eq(a.ca_pem, "SA-CA");
	ck_assert_str_eq(a.namespace, "work");
	cae_k8s *k = NULL;
	ck_assert_int_eq(cae_k8s_new(&a, &k, &err), 0);
	ck_assert_ptr_null(a.server); /* moved */
	ck_assert_str_eq(cae_k8s_server(k), "https://[fd00::1]:443");
	ck_assert_str_eq(cae_k8s_namespace(k), "work");
	cae_k8s_free(k);
}
END_TEST

START_TEST(load_follows_kubeconfig_variable)
{
	tu_write(dir, "kc", two_contexts);
	tu_sh("mkdir -p %s/pki && printf 'X' > %s/pki/ca.crt", dir, dir);
	char list[4200];
	snprintf(list, sizeof(list), "%s/absent:%s/kc", dir, dir);
	setenv("KUBECONFIG", list, 1);
	cae_k8s_auth a;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_auth_load(NULL, "a", &a, &err) == 0, "%s", err.message);
	ck_assert_str_eq(a.token, "tok-a");
	cae_k8s_auth_clear(&a);
	snprintf(list, sizeof(list), "%s/absent", dir);
	setenv("KUBECONFIG", list, 1);
	ck_assert_int_eq(cae_k8s_auth_load(NULL, NULL, &a, &err), -ENOENT);
	unsetenv("KUBECONFIG");
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("kubeconfig");
	TCase *tc = tcase_create("kubeconfig");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, current_context_with_inline_data_and_relative_files);
	tcase_add_test(tc, json_kubeconfig_token_file_and_insecure);
	tcase_add_test(tc, refusals);
	tcase_add_test(tc, in_cluster_service_account);
	tcase_add_test(tc, load_follows_kubeconfig_variable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
