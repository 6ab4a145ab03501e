// A Maven plugin of the tests' own (tests/data/maven/make.sh builds it; goal prefix
// "dependency", so the prepare's `mvn dependency:resolve` runs it): Maven resolves the
// project's dependencies before it runs, it prints the test class path, then runs the
// project's forge.sh when there is one, the code an attacker's project runs in the prepare.
package cae;

public class Resolve implements org.apache.maven.plugin.Mojo {
	private java.util.List<String> classpath;
	private org.apache.maven.plugin.logging.Log log;

	public void execute() throws org.apache.maven.plugin.MojoExecutionException {
		for (String c : classpath)
			System.out.println("cp: " + c);
		try {
			if (new java.io.File("forge.sh").exists()
			    && new ProcessBuilder("sh", "forge.sh").inheritIO().start().waitFor() != 0)
				throw new org.apache.maven.plugin.MojoExecutionException("forge.sh failed");
		} catch (java.io.IOException | InterruptedException e) {
			throw new org.apache.maven.plugin.MojoExecutionException("forge.sh", e);
		}
	}

	public void setLog(org.apache.maven.plugin.logging.Log l) {
		log = l;
	}

	public org.apache.maven.plugin.logging.Log getLog() {
		return log;
	}
}
