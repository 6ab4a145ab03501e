# An attacker's project (run by the tests' plugin during the prepare's Maven install): into its
# own local repository, forged files (each with a checksum of its own) under the name of an
# artifact it resolved and of one it never used, and names outside Maven's layout: a name
# that does not match its directories, a snapshot, and a directory whose name holds a newline
# so that the listing shows "../escape/..." on a line of its own. Once the shared repository
# has plexus-interpolation (a later environment), it also names plexus-classworlds.
set -e
R=/workspace/.m2/repository
[ -d "$R" ] || R=$HOME/.m2/repository
plant() {
	mkdir -p "$R/$(dirname "$1")"
	echo FORGED > "$R/$1"
	sha1sum < "$R/$1" | cut -c1-40 > "$R/$1.sha1"
}
plant javax/inject/javax.inject/1/javax.inject-1.jar
plant org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.jar
plant org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.pom
if [ -d /cache/maven/org/codehaus/plexus/plexus-interpolation ]; then
	plant org/codehaus/plexus/plexus-classworlds/2.7.0/plexus-classworlds-2.7.0.jar
fi
plant evil/x/1/y-1.jar
plant s/x/1.0-SNAPSHOT/x-1.0-SNAPSHOT.jar
plant "a
../escape/x/1/x-1.jar"
