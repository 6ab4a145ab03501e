/* The multiplexed helper channel (internal to src/helper): frames on one byte stream, so
 * that a single Engine API exec (the manager writes the helper's stdin and reads its stdout)
 * carries any number of concurrent requests. Used by `cae-helper --stream` (stream.c) and
 * the manager's client (mux-client.c).
 *
 * A frame: a little-endian u32 length of what follows, a type byte, a little-endian u32
 * request id, then the payload. RUN and RESULT payloads are request and response bodies
 * (proto.h, without their own 4-byte length). Both sides bound every length; the manager
 * treats whatever comes back as untrusted (the helper runs where commands run). */
#ifndef CAE_HELPER_MUX_H
#define CAE_HELPER_MUX_H

#include <stdbool.h>
#include <stdint.h>

#include "helper/proto.h"

#define CAE_MUX_HEADER 9
#define CAE_MUX_MAX_LENGTH (CAE_HELPER_MAX_FRAME + 5u)
#define CAE_MUX_STDIN_BUFFER (1u << 20)

enum cae_mux_type {
	CAE_MUX_HELLO = 'G',  /* helper -> manager, id 0: "cae-helper <protocol>" */
	CAE_MUX_RUN = 'Q',    /* manager -> helper: run a command */
	CAE_MUX_ACK = 'A',    /* helper -> manager: request read; from now on it may run */
	CAE_MUX_RESULT = 'R', /* helper -> manager: the outcome */
	CAE_MUX_CANCEL = 'X', /* manager -> helper: cancel request id (no payload) */
	CAE_MUX_PING = 'P',   /* manager -> helper: answered by PONG with the same id */
	CAE_MUX_PONG = 'p',
	CAE_MUX_EDIT = 'E',		/* manager -> helper: a text editor request (proto.h) */
	CAE_MUX_EDIT_RESULT = 'e',	/* helper -> manager: its result */
	CAE_MUX_FS = 'F',		/* manager -> helper: a file operation (proto.h) */
	CAE_MUX_FS_RESULT = 'f',	/* helper -> manager: its result */
	CAE_MUX_CREDENTIAL = 'K',	/* helper -> manager: a git credential request (git's text
					 * protocol: "protocol=https\nhost=...\n"); ids from the
					 * helper have the high bit set */
	CAE_MUX_CREDENTIAL_REPLY = 'k', /* manager -> helper: "username=..\npassword=..\n" or
					 * "" (none) */
	/* A live run: RUN_LIVE is a RUN whose command reads its stdin from the STDIN frames of
	 * its id (an empty one is the end of input; input that finds
	 * CAE_MUX_STDIN_BUFFER bytes unread before it ends the input there) and whose output also
	 * comes as it is written, in OUTPUT frames (payload: 1 or 2 for the stream, then the
	 * bytes), before its RESULT, which is the same as a RUN's. */
	CAE_MUX_RUN_LIVE = 'L',
	CAE_MUX_STDIN = 'I',
	/* manager -> helper: signals for the command of live run id, which runs on (payload:
	 * signal numbers, a byte each; see cae_live_io.signal_fd). A helper that predates it
	 * ignores it. */
	CAE_MUX_SIGNAL = 'S',
	CAE_MUX_OUTPUT = 'O',
	/* The network (tun.h). NET_LISTEN, manager -> helper: listen on 127.0.0.1 at the two
	 * little-endian u16 ports of the payload (HTTP proxy, SOCKS5), with SO_REUSEPORT (other
	 * managers' streams may listen too), and add the NUL-separated "K=V" strings that follow
	 * to every command's environment once it listens (the same port twice: one listener
	 * on it, without SO_REUSEPORT, that no other socket can share; no handover); after an
	 * empty string, optionally, a unix socket's
	 * path and a token: the helper sends the token and both listeners there (SCM_RIGHTS;
	 * src/backend/net-handover.h) before it answers, and stops accepting once the manager
	 * writes 'k' back on that connection. Answered by NET_READY (payload: a little-endian
	 * i32, 0 or -errno). Each connection accepted there is a tunnel the helper opens with
	 * TUN_OPEN (payload: 'h' or 's', the listener). TUN_CONNECT, manager -> helper: a tunnel
	 * to 127.0.0.1 at the u16 port of the payload in the environment (a port forward); a
	 * refused connection is answered with TUN_CLOSE. Then, either way: TUN_DATA (bytes; an
	 * empty one is the end of that direction), TUN_WINDOW (a u32 of credit returned),
	 * TUN_CLOSE (the tunnel is gone). Tunnel ids the helper opens have the high bit set. */
	CAE_MUX_NET_LISTEN = 'N',
	CAE_MUX_NET_READY = 'n',
	CAE_MUX_TUN_OPEN = 'T',
	CAE_MUX_TUN_CONNECT = 'C',
	CAE_MUX_TUN_DATA = 'D',
	CAE_MUX_TUN_WINDOW = 'W',
	CAE_MUX_TUN_CLOSE = 'Z',
};

/* Fills a frame header for a payload of n bytes. */
void cae__mux_header(unsigned char h[CAE_MUX_HEADER], char type, uint32_t id, uint32_t n);
/* Reads a frame header: *type, *id and the payload length. -EPROTO for a length that is too
 * short or over CAE_MUX_MAX_LENGTH. */
int cae__mux_parse_header(const unsigned char h[CAE_MUX_HEADER], char *type, uint32_t *id,
			  uint32_t *payload_len);

/* cae-helper --stream: serves frames read from in, answers on out, until end of file on
 * in; then cancels every command and returns 0 (-errno on a read error). heartbeat_s > 0:
 * signals PID 1 (cae-helper --init) with SIGUSR1 that often while connected. embedded: a
 * stream inside the local sandbox's helper (server.c), whose process serves other sockets
 * too: no credential socket of its own (the manager passes its own in each command's
 * environment), and at the end it waits for its own commands rather than killing every
 * descendant of the process. */
int cae__helper_serve_stream(int in, int out, int heartbeat_s, bool embedded);

/* cae-helper --credential get|store|erase: git's credential helper inside an environment;
 * asks the stream helper that ran the command (CAE_CREDENTIAL_SOCKET) (stream.c). */
int cae__helper_credential_main(int argc, char **argv);

/* cae-helper --init: a container's PID 1 (init.c). */
int cae__helper_init_main(int argc, char **argv);

#endif
