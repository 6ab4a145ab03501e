# The tests' Maven remote and project (tests/backend/test-local.c):
#   make.sh DIR REPO PORT
# DIR/www/maven2: a Maven repository in Maven's layout, real artifacts of Debian's
# /usr/share/maven-repo (javax.inject 1, plexus-utils 3.4.2, plexus-interpolation 1.26,
# plexus-classworlds 2.7.0) and the tests' plugin (Resolve.java, ResolvePlugins.java, plugin.xml), each with its
# .sha1 (plexus-interpolation's pom: a wrong one); beside them, files an honest fill never asks for (a name outside the layout, a
# snapshot, and DIR/www/escape outside the repository). REPO gets a project whose pom.xml
# names that repository (http://127.0.0.1:PORT/maven2/) as its central, depends on
# javax.inject and uses the plugin, and forge.sh.
set -eu
D=$1 REPO=$2 PORT=$3 HERE=$(cd "$(dirname "$0")" && pwd)
M=$D/www/maven2
copy() {
	mkdir -p "$M/$1"
	cp -L "/usr/share/maven-repo/$1/$2.jar" "/usr/share/maven-repo/$1/$2.pom" "$M/$1/"
}
copy javax/inject/javax.inject/1 javax.inject-1
copy org/codehaus/plexus/plexus-utils/3.4.2 plexus-utils-3.4.2
copy org/codehaus/plexus/plexus-interpolation/1.26 plexus-interpolation-1.26
copy org/codehaus/plexus/plexus-classworlds/2.7.0 plexus-classworlds-2.7.0
P=$M/cae/test/cae-maven-plugin/1.0
mkdir -p "$P" "$D/plugin/META-INF/maven"
javac -nowarn -d "$D/plugin" -cp /usr/share/maven/lib/maven-plugin-api-3.x.jar "$HERE/Resolve.java" "$HERE/ResolvePlugins.java"
cp "$HERE/plugin.xml" "$D/plugin/META-INF/maven/plugin.xml"
(cd "$D/plugin" && jar cf "$P/cae-maven-plugin-1.0.jar" .)
cat > "$P/cae-maven-plugin-1.0.pom" <<POM
<project><modelVersion>4.0.0</modelVersion><groupId>cae.test</groupId><artifactId>cae-maven-plugin</artifactId><version>1.0</version><packaging>maven-plugin</packaging><dependencies><dependency><groupId>org.codehaus.plexus</groupId><artifactId>plexus-utils</artifactId><version>3.4.2</version></dependency></dependencies></project>
POM
for f in evil/x/1/y-1.jar s/x/1.0-SNAPSHOT/x-1.0-SNAPSHOT.jar ../escape/x/1/x-1.jar; do
	mkdir -p "$(dirname "$M/$f")"
	echo OUTSIDE > "$M/$f"
done
find "$D/www" -type f ! -name '*.sha1' | while read -r f; do
	sha1sum < "$f" | cut -c1-40 > "$f.sha1"
done
# a file whose checksum the remote gets wrong
echo 0123456789abcdef0123456789abcdef01234567 > \
	"$M/org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.pom.sha1"
cat > "$REPO/pom.xml" <<POM
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>cae.test</groupId>
  <artifactId>app</artifactId>
  <version>1.0</version>
  <repositories>
    <repository><id>central</id><url>http://127.0.0.1:$PORT/maven2/</url></repository>
  </repositories>
  <pluginRepositories>
    <pluginRepository><id>central</id><url>http://127.0.0.1:$PORT/maven2/</url></pluginRepository>
  </pluginRepositories>
  <dependencies>
    <dependency><groupId>javax.inject</groupId><artifactId>javax.inject</artifactId><version>1</version></dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><groupId>cae.test</groupId><artifactId>cae-maven-plugin</artifactId><version>1.0</version></plugin>
    </plugins>
  </build>
</project>
POM
cp "$HERE/forge.sh" "$REPO/forge.sh"
