// The tests' plugin's second goal (tests/data/maven/make.sh builds it with Resolve.java):
// "dependency:resolve-plugins", which the prepare runs after "dependency:resolve" so that
// the build plugins an agent's `mvn test` takes are in the local repository for the fill.
// Maven resolves this plugin before it runs; the goal leaves a mark in the project for the
// test to see that the prepare ran it.
package cae;

public class ResolvePlugins implements org.apache.maven.plugin.Mojo {
	private org.apache.maven.plugin.logging.Log log;

	public void execute() throws org.apache.maven.plugin.MojoExecutionException {
		try {
			java.nio.file.Files.write(java.nio.file.Paths.get("resolve-plugins.ran"),
						  "ran\n".getBytes());
		} catch (java.io.IOException e) {
			throw new org.apache.maven.plugin.MojoExecutionException("mark", e);
		}
	}

	public void setLog(org.apache.maven.plugin.logging.Log l) {
		log = l;
	}

	public org.apache.maven.plugin.logging.Log getLog() {
		return log;
	}
}
