import { useState } from 'preact/hooks';
import { Field } from '../ui/components';

/** Token login: the token is kept in sessionStorage only (see api.ts). */
export function LoginPage({ refused, onToken }: { refused: boolean; onToken: (t: string) => void }) {
  const [token, setToken] = useState('');
  return (
    <main class="login">
      <h1>Kurrent</h1>
      {refused ? (
        <div class="error" role="alert">
          The control plane refused this token (401). Check IPXE_CP_TOKEN and sign in again.
        </div>
      ) : (
        <p>This control plane requires a token (IPXE_CP_TOKEN).</p>
      )}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (token.trim()) onToken(token.trim());
        }}
      >
        <Field label="API token">
          <input type="password" name="token" autoComplete="off" autoFocus value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        </Field>
        <button type="submit" class="primary">
          Sign in
        </button>
      </form>
    </main>
  );
}
