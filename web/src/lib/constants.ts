/** Enumerations of the API (the spec's enums), for pickers. */
export const OS_NAMES = ['windows', 'ubuntu', 'debian', 'centos', 'esxi'] as const;
export const MENU_DEFAULTS = ['windows', 'ubuntu', 'debian', 'centos', 'esxi', 'menu-diag', 'menu-install', 'config', 'shell', 'reboot', 'exit'] as const;
