/** menu.ipxe operating-system items: also the os of a system disk (reference 7.1 / 7.3). */
export const OS_ITEMS = ['windows', 'ubuntu', 'debian', 'centos', 'esxi'] as const;
/** Every item id of the menu.ipxe main menu: the legal values of boot.menu_default. */
export const MENU_ITEMS = [...OS_ITEMS, 'menu-diag', 'menu-install', 'config', 'shell', 'reboot', 'exit'] as const;
